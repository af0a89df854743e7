"""A publish burst cut short by SIGKILL, for the tests and the benchmark of what a node's peers
go through when it dies mid-burst and comes back (issue 37)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import ROOT
from tests.harness.cluster import wait_for
from tests.harness.procs import NodeApi, NodeProcess, start_all


def on_defaults(base: Path, name: str, *peers: NodeProcess) -> NodeProcess:
    """A node on the default settings (no fast timers), bootstrapped from ``peers``; not
    started yet (``procs.start_all`` starts several at once)."""
    args: list[str] = []
    for peer in peers:
        args += ["--bootstrap", peer.listen_addrs[0]]
    return NodeProcess(base / name, *args)


def start_on_defaults(base: Path, name: str, *peers: NodeProcess) -> NodeProcess:
    return on_defaults(base, name, *peers).start()


def events_held(node: NodeApi) -> int:
    """How many events the node's log holds."""
    return int(node.get("/v1/status")["events"])


def _publish(node: NodeProcess, count: int, path: Path, channel: str) -> subprocess.Popen[bytes]:
    """Start ``syncnode publish --lines`` of ``count`` lines on ``node``."""
    path.write_text("".join(f"{path.stem} event {i:06d}\n" for i in range(count)))
    return subprocess.Popen(node.cli_command("publish", channel, "--lines", str(path)),
                            cwd=ROOT, env=node.cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def burst_and_kill(node: NodeProcess, count: int, kill_after: int, workdir: Path,
                   channel: str = "general") -> None:
    """Publish ``count`` lines on ``node`` (``syncnode publish --lines``) and kill the node with
    SIGKILL as soon as its log holds ``kill_after`` events (or the burst ended first)."""
    publisher = _publish(node, count, workdir / "burst.txt", channel)
    try:
        wait_for(lambda: events_held(node) >= kill_after or publisher.poll() is not None, 300,
                 f"{kill_after} events not held", pause_max=0.02)
        node.kill()
    finally:
        publisher.kill()
        publisher.wait(timeout=30)


def start_three(base: Path, nodes: list[NodeProcess]) -> list[NodeProcess]:
    """Nodes a, b and c on the defaults, each connected to both others; each is appended to
    ``nodes`` as it starts (the caller kills them). The three start side by side (their
    interpreters' start-ups overlap), then b and c join a and c joins b (``syncnode join``'s
    API call); b and c restart bootstrapped from a."""
    trio_of = [on_defaults(base, name) for name in "abc"]
    nodes += trio_of
    a, b, c = start_all(trio_of)
    for node in (b, c):
        node.post("/v1/peers", {"multiaddr": a.listen_addrs[0]})
        node.extra_args = ["--bootstrap", a.listen_addrs[0]]
    c.post("/v1/peers", {"multiaddr": b.listen_addrs[0]})
    wait_for(lambda: all(len(n.get("/v1/peers")["connected"]) >= 2 for n in nodes), 60,
             "the three nodes did not connect")
    return [a, b, c]


@contextmanager
def killed_mid_burst(base: Path, count: int, kill_after: int, *, away_after: int = 0
                     ) -> Iterator[tuple[list[NodeProcess], int]]:
    """Nodes a, b and c on the defaults, connected; b publishes ``count`` events and is killed
    with SIGKILL once it stored ``kill_after``, then restarted. Yields ([a, b, c], the events b
    holds after its restart); nodes appended to the list are killed at the end too.

    ``away_after``: b first publishes that many events, which a and c take in, and c is
    stopped (SIGTERM) for the burst and started again after b: c then holds exactly the
    start of b's stream and lacks the whole burst, whatever gossip delivered to a."""
    nodes: list[NodeProcess] = []
    try:
        _, b, c = start_three(base, nodes)
        if away_after:
            with _publish(b, away_after, base / "before.txt", "general") as first:
                assert first.wait(timeout=120) == 0
            wait_for(lambda: all(events_held(n) == away_after for n in nodes), 120,
                     "a and c did not take in b's first events")
            c.terminate()
        burst_and_kill(b, count, kill_after, base)
        b.start()
        if away_after:
            c.start()
        yield nodes, events_held(b)
    finally:
        for n in nodes:
            n.kill()
