"""The emulated internet behaves like one: NAT lets connections out and drops them in."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.net.netns import Internet, NetError, run

_CONNECT = (
    "import socket,sys\n"
    "s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)\n"
    "print(s.getsockname()[0]); s.close()\n"
)
_SERVE = (
    "import socket\n"
    "l=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "l.bind(('0.0.0.0', 7000)); l.listen(8); l.settimeout(20)\n"
    "while True:\n"
    "    c, a = l.accept(); c.sendall(a[0].encode()); c.close()\n"
)


def _connect(ns: str, ip: str) -> bool:
    return run("python3", "-c", _CONNECT, ip, "7000", ns=ns, check=False).returncode == 0


def test_nat_lets_out_and_drops_in(internet: Internet) -> None:
    pub = internet.add_public()
    home = internet.add_home()
    inside = internet.add_home_host(home)
    neighbour = internet.add_home_host(home)
    other = internet.add_home_host(internet.add_home())
    # A listener on the router too: without one, a connection to its WAN address is refused
    # whether or not the NAT drops it, and the two inbound checks below could not fail.
    servers = [subprocess.Popen(["ip", "netns", "exec", ns, "python3", "-c", _SERVE])
               for ns in (pub.ns, inside.ns, internet.routers[home])]
    try:
        time.sleep(0.5)
        # Side by side: a dropped connection attempt waits out its whole timeout (2 s).
        checks = {
            "a home host must reach a public host": (inside.ns, pub.ip, True),
            "hosts of one home reach each other": (neighbour.ns, inside.ip, True),
            "another home's private address is unrouted": (other.ns, inside.ip, False),
            "NAT must drop inbound": (pub.ns, internet.router_wan_ip(home), False),
            "private addresses are not routed": (pub.ns, inside.ip, False),
            "no home-to-home inbound": (other.ns, internet.router_wan_ip(home), False),
        }
        with ThreadPoolExecutor(len(checks)) as pool:
            seen = dict(zip(checks, pool.map(lambda c: _connect(c[0], c[1]), checks.values()),
                            strict=True))
        for what, (_, _, expected) in checks.items():
            assert seen[what] == expected, what
        internet.set_uplink(home, up=False)
        assert not _connect(inside.ns, pub.ip), "uplink down is a partition"
        internet.set_uplink(home, up=True)
        assert _connect(inside.ns, pub.ip)
    finally:
        for server in servers:
            server.kill()
            server.wait()


def test_cleanup_removes_every_namespace() -> None:
    net = Internet()
    net.add_home_host(net.add_home())
    names = [n for n in run("ip", "netns", "list").stdout.split() if n.startswith(net.tag)]
    assert len(names) == 3
    net.close()
    left = [n for n in run("ip", "netns", "list").stdout.split() if n.startswith(net.tag)]
    assert left == []


def test_bad_command_is_an_error(internet: Internet) -> None:
    with pytest.raises(NetError):
        run("ip", "link", "set", "nosuchlink", "up", ns=internet.core)
