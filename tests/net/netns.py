"""Building an emulated internet out of Linux network namespaces (root only).

Layout (every name starts with a per-run random tag, so runs side by side never collide)::

    <tag>-inet                      the "internet": one bridge, no addresses of its own
      |-- <tag>-p0 .. <tag>-pN      public hosts, eth0 = 198.18.0.(10+i)/15
      |-- <tag>-r0 .. <tag>-rM      home routers, wan = 198.19.1.(10+j)/15,
            |                         lan = 100.64.j.1/24, nftables masquerade out of wan,
            |                         new connections coming in on wan dropped (hosts of one
            |                         home reach each other: with br_netfilter loaded, bridged
            |                         LAN frames pass the forward hook too, so it accepts all
            |                         that does not come in on wan)
            |-- <tag>-h0 ..         home hosts, eth0 = 100.64.j.(10+k)/24,
                                      route 198.18.0.0/15 via the router (no default route)

No namespace has a default route and none is connected to the root namespace, so no packet
can reach an address outside loopback and these namespaces. Cleanup: :meth:`Internet.close`
(fixture finalizers call it), an ``atexit`` hook, and :func:`sweep_stale` which deletes the
namespaces of earlier runs whose owning process is gone (marker files in ``MARK_DIR``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MARK_DIR", "Host", "Internet", "NetError", "run", "sweep_stale"]

MARK_DIR = Path("/run/syncnode-net")
INTERNET_PREFIX = 15  # 198.18.0.0/15 spans 198.18.x.x and 198.19.x.x
# Public hosts in 198.18/16, home routers in 198.19/16: two of the /16 networks the
# reachability verdict counts (a node is public once two networks confirm it, docs/network.md),
# so a public node on the default settings can be confirmed by its peers.
ROUTER_NFT = """
table ip {tag}nat {{
  chain postrouting {{ type nat hook postrouting priority srcnat; oifname "wan" masquerade; }}
}}
table inet {tag}fw {{
  chain forward {{
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname != "wan" accept
  }}
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname "wan" ct state established,related accept
    iifname "wan" drop
  }}
}}
"""


class NetError(RuntimeError):
    """A namespace command failed (its stderr is in the message)."""


def run(*cmd: str, ns: str | None = None, check: bool = True,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (inside namespace ``ns`` when given)."""
    full = ["ip", "netns", "exec", ns, *cmd] if ns else list(cmd)
    result = subprocess.run(full, capture_output=True, text=True, input=input, timeout=30)
    if check and result.returncode != 0:
        raise NetError(f"{' '.join(full)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


@dataclass
class Host:
    """One namespace that can run a node: a public host or a host inside a home."""

    name: str  # short role name, e.g. "p0" or "h3"
    ns: str  # the namespace
    ip: str  # its address (public or private)
    home: int | None = None  # index of its home router, None for public hosts
    link: str = "eth0"  # its interface inside ``ns``

    @property
    def public(self) -> bool:
        return self.home is None


@dataclass
class Internet:
    """Namespaces of one emulated internet; use as a context manager or call :meth:`close`."""

    tag: str = field(default_factory=lambda: "sn" + secrets.token_hex(3))
    hosts: dict[str, Host] = field(default_factory=dict)
    routers: list[str] = field(default_factory=list)
    _namespaces: list[str] = field(default_factory=list)
    _home_hosts: dict[int, int] = field(default_factory=dict)
    _links: int = 0

    def __post_init__(self) -> None:
        if len(self.tag) > 8:
            raise ValueError("tag too long: interface names are limited to 15 characters")
        sweep_stale()
        MARK_DIR.mkdir(parents=True, exist_ok=True)
        (MARK_DIR / self.tag).write_text(str(os.getpid()))
        atexit.register(self.close)
        self.core = self._namespace("inet")
        run("ip", "link", "add", "br0", "type", "bridge", ns=self.core)
        run("ip", "link", "set", "br0", "up", ns=self.core)

    def __enter__(self) -> Internet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building ---------------------------------------------------------------------------

    def _namespace(self, role: str) -> str:
        name = f"{self.tag}-{role}"
        run("ip", "netns", "add", name)
        self._namespaces.append(name)
        run("ip", "link", "set", "lo", "up", ns=name)
        return name

    def _wire(self, ns: str, inner: str, bridge_ns: str, bridge: str) -> None:
        """A veth from ``ns`` (named ``inner`` there) to ``bridge`` in ``bridge_ns``."""
        self._links += 1
        outer = f"{self.tag}v{self._links}"  # <= 8 + 1 + 4 characters
        run("ip", "link", "add", outer, "netns", bridge_ns, "type", "veth",
            "peer", "name", inner, "netns", ns)
        run("ip", "link", "set", outer, "master", bridge, "up", ns=bridge_ns)
        run("ip", "link", "set", inner, "up", ns=ns)

    def add_public(self) -> Host:
        index = sum(1 for h in self.hosts.values() if h.public)
        name = f"p{index}"
        ns = self._namespace(name)
        self._wire(ns, "eth0", self.core, "br0")
        ip = f"198.18.0.{10 + index}"
        run("ip", "addr", "add", f"{ip}/{INTERNET_PREFIX}", "dev", "eth0", ns=ns)
        host = Host(name, ns, ip)
        self.hosts[name] = host
        return host

    def add_home(self) -> int:
        """A home router; returns its index for :meth:`add_home_host`."""
        index = len(self.routers)
        ns = self._namespace(f"r{index}")
        self._wire(ns, "wan", self.core, "br0")
        run("ip", "addr", "add", f"198.19.1.{10 + index}/{INTERNET_PREFIX}", "dev", "wan", ns=ns)
        run("ip", "link", "add", "lan", "type", "bridge", ns=ns)
        run("ip", "addr", "add", f"100.64.{index}.1/24", "dev", "lan", ns=ns)
        run("ip", "link", "set", "lan", "up", ns=ns)
        run("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=ns)
        run("nft", "-f", "-", ns=ns, input=ROUTER_NFT.format(tag=self.tag))
        self.routers.append(ns)
        self._home_hosts[index] = 0
        return index

    def router_wan_ip(self, home: int) -> str:
        return f"198.19.1.{10 + home}"

    def add_home_host(self, home: int) -> Host:
        k = self._home_hosts[home]
        self._home_hosts[home] = k + 1
        name = f"h{sum(self._home_hosts.values()) - 1}"
        ns = self._namespace(name)
        self._wire(ns, "eth0", self.routers[home], "lan")
        ip = f"100.64.{home}.{10 + k}"
        run("ip", "addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
        run("ip", "route", "add", f"198.18.0.0/{INTERNET_PREFIX}", "via", f"100.64.{home}.1",
            ns=ns)
        host = Host(name, ns, ip, home=home)
        self.hosts[name] = host
        return host

    # -- faults -----------------------------------------------------------------------------

    def set_uplink(self, home: int, up: bool) -> None:
        """Take a home router's uplink down (a partition of that home) or bring it back."""
        run("ip", "link", "set", "wan", "up" if up else "down", ns=self.routers[home])

    def set_host_link(self, host: Host, up: bool) -> None:
        run("ip", "link", "set", host.link, "up" if up else "down", ns=host.ns)

    def cap_bandwidth(self, host: Host, kbit: int) -> None:
        """Cap ``host``'s outgoing rate with a token bucket (tc tbf; the kernel has no netem)."""
        run("tc", "qdisc", "replace", "dev", host.link, "root", "tbf", "rate", f"{kbit}kbit",
            "burst", "32kbit", "latency", "400ms", ns=host.ns)

    def nat_drops(self, home: int) -> str:
        """The router's ruleset with counters (for debugging a failed test)."""
        return run("nft", "list", "ruleset", ns=self.routers[home], check=False).stdout

    # -- cleanup ----------------------------------------------------------------------------

    def close(self) -> None:
        for ns in reversed(self._namespaces):
            _delete_namespace(ns)
        self._namespaces.clear()
        with contextlib.suppress(FileNotFoundError):
            (MARK_DIR / self.tag).unlink()


def _delete_namespace(ns: str) -> None:
    # Kill what still runs inside (a node a failed test left behind), then drop the name.
    pids = run("ip", "netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)
    run("ip", "netns", "del", ns, check=False)


def sweep_stale() -> list[str]:
    """Delete namespaces of runs whose owning process died (a crashed or killed test run)."""
    swept: list[str] = []
    if not MARK_DIR.is_dir():
        return swept
    existing = run("ip", "netns", "list", check=False).stdout.split("\n")
    names = [line.split()[0] for line in existing if line.strip()]
    for mark in MARK_DIR.iterdir():
        try:
            pid = int(mark.read_text().strip())
        except (OSError, ValueError):
            continue
        if _alive(pid):
            continue
        for ns in names:
            if ns.startswith(f"{mark.name}-"):
                _delete_namespace(ns)
                swept.append(ns)
        with contextlib.suppress(FileNotFoundError):
            mark.unlink()
    return swept


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
