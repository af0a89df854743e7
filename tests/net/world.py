"""Scenario building blocks: a group of real nodes on an emulated internet, and what to wait on.

``build_world(internet, base, publics=2, homes=3, per_home=2)`` starts every node in parallel
(public nodes on 198.18.0.x, home nodes behind their NAT routers), each on its own listen port so
the routers' masquerade keeps it (hole punching predicts the external port from it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.harness.cluster import FAST_ENV, channel_log, wait_for
from tests.harness.procs import NodeProcess
from tests.net.netns import Internet
from tests.net.nodes import NetNode

__all__ = ["NET_ENV", "QUICK_DIAL", "World", "build_world", "direct_group", "logs_identical"]

# Fast timers (tests/harness/cluster.py) plus quick reachability probing.
NET_ENV = {
    **FAST_ENV,
    "SYNCNODE_REACHABILITY_PROBE_INTERVAL_S": "5",
    "SYNCNODE_REACHABILITY_RELAY_RETRY_S": "3",
    "SYNCNODE_REACHABILITY_PUNCH_BACKOFF_S": "2",
    "SYNCNODE_MEMBERSHIP_PX_INTERVAL_S": "5",
    # The emulated internet is one 198.18.0.0/15: each of its addresses counts as a network
    # of its own for the dial-back verdict and the relay's per-network share.
    "SYNCNODE_REACHABILITY_NETWORK_PREFIX_V4": "32",
    "SYNCNODE_REACHABILITY_RELAY_SHARE_PREFIX_V4": "32",
}
# For the tests (the net bench keeps the default): a dial-back to an address
# behind NAT fails only when its dial times out, so a home node finds itself private a dial
# timeout after asking (10 s by default). A dial that gets through here takes milliseconds (5 s
# leaves a loaded machine's handshakes a wide margin).
QUICK_DIAL = {"SYNCNODE_P2P_DIAL_TIMEOUT_S": "5"}


@dataclass
class World:
    internet: Internet
    public: list[NetNode]
    home: list[NetNode]

    @property
    def nodes(self) -> list[NetNode]:
        return self.public + self.home

    def home_pairs_across_nats(self) -> list[tuple[NetNode, NetNode]]:
        return [(a, b) for a, b in itertools.combinations(self.home, 2)
                if a.host.home != b.host.home]

    def status(self, node: NetNode) -> dict:  # type: ignore[type-arg]
        return dict(node.get("/v1/status"))

    def describe(self) -> str:
        """One line per node: reachability, relays, and its connections by path."""
        lines = []
        for node in self.nodes:
            try:
                net = node.get("/v1/status")["network"]
                paths = self.paths(node)
            except Exception as exc:  # stopped, or not answering
                lines.append(f"{node.host.name}: {exc!r}")
                continue
            names = {n.peer_id: n.host.name for n in self.nodes}
            conns = " ".join(f"{names.get(p, p[-6:])}:{v[0]}" for p, v in sorted(paths.items()))
            lines.append(f"{node.host.name}: {net['reachability']} relays={len(net['relays'])} "
                         f"punch={net['punch']} conns={conns}")
        names = {n.peer_id: n.host.name for n in self.nodes if n.peer_id}
        for node in self.home:
            lines.extend(f"  {node.host.name} log: {line}" for line in _events(node, names))
        return "\n".join(lines)

    def wait(self, condition: Callable[[], bool], timeout: float, message: str) -> float:
        """Seconds until ``condition`` held; AssertionError with every node's state if not."""
        start = time.monotonic()
        try:
            wait_for(condition, timeout, message)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.describe()}") from None
        return time.monotonic() - start

    def paths(self, node: NetNode) -> dict[str, str]:
        """Connected peer id -> "direct" or "relayed"."""
        return {p["peer_id"]: p.get("path", "direct") for p in node.get("/v1/peers")["connected"]}


# The node log lines that tell what a home node's connections went through (a failed wait
# prints them: CI keeps no node logs).
_EVENTS = ("hole punch", "closing connection", "network back", "reserved a relay")


def _events(node: NetNode, names: dict[str, str], last: int = 12) -> list[str]:
    try:
        text = node.stderr_path.read_text(errors="replace")
    except OSError as exc:
        return [repr(exc)]
    out = []
    for line in text.splitlines():
        if any(event in line for event in _EVENTS):
            for peer, name in names.items():
                line = line.replace(peer, name)
            out.append(line.removeprefix("ts=")[:160])
    return out[-last:]


@contextmanager
def build_world(internet: Internet, base: Path, *, publics: int = 2, homes: int = 3,
                per_home: int = 2, env: dict[str, str] | None = None,
                home_env: dict[int, dict[str, str]] | None = None,
                defaults: bool = False) -> Iterator[World]:
    """``home_env``: extra environment for the i-th home node. ``defaults``: what a user runs,
    every node listening on ``0.0.0.0`` at the default port 4001 (config.example.toml) and
    none of ``NET_ENV``'s fast timers."""
    hosts = [internet.add_public() for _ in range(publics)]
    for _ in range(homes):
        index = internet.add_home()
        hosts += [internet.add_home_host(index) for _ in range(per_home)]
    extra = {publics + i: e for i, e in (home_env or {}).items()}
    timers = {} if defaults else NET_ENV
    nodes = [NetNode(h, base / h.name, port=4001 if defaults else 4001 + i,
                     env={**timers, **(env or {}), **extra.get(i, {})}, wildcard=defaults)
             for i, h in enumerate(hosts)]
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(lambda n: n.start(timeout=120), nodes))
        yield World(internet, nodes[:publics], nodes[publics:])
    finally:
        for node in nodes:
            node.kill()


def direct_group(world: World) -> bool:
    """True when the direct connections among the home nodes make one connected graph (what
    they need to keep syncing once the public nodes, and their relays, are gone)."""
    home = {n.peer_id: n for n in world.home}
    first = world.home[0].peer_id
    seen, todo = {first}, [first]
    while todo:
        for peer, path in world.paths(home[todo.pop()]).items():
            if path == "direct" and peer in home and peer not in seen:
                seen.add(peer)
                todo.append(peer)
    return len(seen) == len(home)


def logs_identical(nodes: Sequence[NodeProcess], channel: str, expected: int) -> bool:
    logs = [channel_log(n, channel) for n in nodes]
    return len(logs[0]) == expected and all(log == logs[0] for log in logs)


def wait_all(nodes: list[NetNode], check: Callable[[NetNode], bool], timeout: float,
             message: str) -> None:
    wait_for(lambda: all(check(n) for n in nodes), timeout, message)
