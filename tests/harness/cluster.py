"""A cluster of real nodes on loopback (processes, or nodes in this process), and helpers to
publish, compare logs and read metrics."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from sync.identity import peer_id_of
from tests.harness.inproc import InProcessNode
from tests.harness.procs import NodeApi, NodeProcess, start_all

# Fast timers so that tests converge in seconds, not minutes.
FAST_ENV = {
    "SYNCNODE_RECON_INTERVAL_S": "2",
    "SYNCNODE_SDS_RESEND_INTERVAL_S": "3",
    "SYNCNODE_SDS_SYNC_INTERVAL_S": "3",
    "SYNCNODE_SDS_REPAIR_T_MIN_S": "1",
    "SYNCNODE_SDS_REPAIR_T_MAX_S": "4",
    "SYNCNODE_STORAGE_SQLITE_SYNCHRONOUS": "NORMAL",
}


def preset_identity(data_dir: Path) -> str:
    """Give a node its key before it starts, so that its peer id can go into others' config
    (allowed_peers, blocks.producers); returns that peer id."""
    key = Ed25519PrivateKey.generate()
    data_dir.mkdir(parents=True, exist_ok=True)
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    (data_dir / "identity.key").write_bytes(pem)
    (data_dir / "identity.key").chmod(0o600)
    return peer_id_of(key)


def _bootstrapped(args: Sequence[str], bootstrap: Sequence[NodeApi]) -> list[str]:
    return [*args, *(a for peer in bootstrap for a in ("--bootstrap", peer.listen_addrs[0]))]


def fast_node(base: Path, name: str, *args: str, env: dict[str, str] | None = None,
              bootstrap: Sequence[NodeApi] = ()) -> NodeProcess:
    """``start_node``'s node, not started yet (``procs.start_all`` starts several at once)."""
    return NodeProcess(base / name, *_bootstrapped(args, bootstrap),
                       env={**FAST_ENV, **(env or {})})


def start_node(base: Path, name: str, *args: str, env: dict[str, str] | None = None,
               bootstrap: Sequence[NodeApi] = ()) -> NodeProcess:
    """A node process on fast timers in ``base / name``, dialling ``bootstrap`` at start."""
    return fast_node(base, name, *args, env=env, bootstrap=bootstrap).start()


def fast_inproc(base: Path, name: str, *args: str, env: dict[str, str] | None = None,
                bootstrap: Sequence[NodeApi] = ()) -> InProcessNode:
    """``start_inproc``'s node, not started yet (``procs.start_all`` starts several at once)."""
    return InProcessNode(base / name, *_bootstrapped(args, bootstrap),
                         env={**FAST_ENV, **(env or {})})


def start_inproc(base: Path, name: str, *args: str, env: dict[str, str] | None = None,
                     bootstrap: Sequence[NodeApi] = ()) -> InProcessNode:
    """``start_node``'s node, run in this process (tests.harness.inproc)."""
    return fast_inproc(base, name, *args, env=env, bootstrap=bootstrap).start()


def join_all(nodes: Sequence[NodeApi]) -> None:
    """Have each node join every node before it (``syncnode join``'s API call)."""
    for i, node in enumerate(nodes):
        for peer in nodes[:i]:
            node.post("/v1/peers", {"multiaddr": peer.listen_addrs[0]})


@contextmanager
def cluster(
    base: Path, size: int, *, env: dict[str, str] | None = None, in_process: bool = False
) -> Iterator[list[NodeApi]]:
    """``size`` connected nodes on fast timers, started side by side (processes, or with
    ``in_process`` nodes in this process), then each joined to every node before it."""
    nodes: list[NodeApi] = []
    try:
        if in_process:
            nodes.extend(fast_inproc(base, f"n{i}", env=env) for i in range(size))
        else:
            nodes.extend(fast_node(base, f"n{i}", env=env) for i in range(size))
        start_all(nodes)
        join_all(nodes)
        wait_for(lambda: all(len(n.get("/v1/peers")["connected"]) >= size - 1 for n in nodes),
                 30, "cluster did not connect")
        yield nodes
    finally:
        for node in nodes:
            node.kill()


# Polling starts fast, so that a condition that holds within moments costs moments (a fixed
# 0.5 s poll cost ~0.25 s per wait on average, over hundreds of waits in ``make test``), and
# backs off to POLL_MAX_S so that a long wait does not load the node it asks.
POLL_FIRST_S, POLL_MAX_S = 0.05, 0.5


def _pauses() -> Iterator[float]:
    pause = POLL_FIRST_S
    while True:
        yield pause
        pause = min(pause * 1.5, POLL_MAX_S)


def wait_for(condition: Callable[[], bool], timeout: float,
             message: str | Callable[[], str], pause_max: float = POLL_MAX_S) -> None:
    """Return once ``condition()`` holds (an HTTP error counts as not yet); fail after
    ``timeout`` seconds of the test's real time, saying ``message`` (or what it returns)."""
    deadline = time.monotonic() + timeout
    for pause in _pauses():
        try:
            if condition():
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() >= deadline:
            break
        time.sleep(min(pause, pause_max))
    said = message if isinstance(message, str) else message()
    raise AssertionError(f"{said} within {timeout} s")


def holds_for(condition: Callable[[], bool], seconds: float, message: str) -> None:
    """Fail as soon as ``condition()`` stops holding within ``seconds`` (a window in which
    something must not happen, with no event that would say it did)."""
    deadline = time.monotonic() + seconds
    for pause in _pauses():
        assert condition(), message
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(pause, left))


async def until(condition: Callable[[], object], timeout: float, message: str,
                pause_max: float = POLL_MAX_S) -> None:
    """``wait_for`` inside trio: poll ``condition()`` (a value, or an awaitable of one) between
    checkpoints of the run (its clock: a MockClock's virtual time in a test that runs on one)."""
    with trio.move_on_after(timeout):
        for pause in _pauses():
            held = condition()
            if inspect.isawaitable(held):
                held = await held
            if held:
                return
            await trio.sleep(min(pause, pause_max))
    raise AssertionError(f"{message} within {timeout} s")


def publish_many(node: NodeApi, channel: str, contents: list[str],
                 threads: int = 8) -> list[str]:
    """Publish concurrently; returns the message ids of the publishes that were answered."""
    with node.client(timeout=60) as client:

        def one(content: str) -> str:
            r = client.post(f"/v1/channels/{channel}/events", json={"content": content})
            r.raise_for_status()
            return str(r.json()["message_id"])

        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, contents))


def channel_events(node: NodeApi, channel: str) -> list[dict[str, Any]]:
    """Every event of ``channel`` as the API lists it, page by page."""
    out: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 10_000}
    while True:
        answer = node.get(f"/v1/channels/{channel}/events", **params)
        out.extend(answer["events"])
        if not answer["more"]:
            return out
        params.update(answer["next"])


def channel_log(node: NodeApi, channel: str) -> list[tuple[int, str, str]]:
    return [(e["lamport"], e["message_id"], e["content"]) for e in channel_events(node, channel)]


def metric(node: NodeApi, name: str) -> float:
    total = 0.0
    for line in node.get("/metrics").splitlines():
        if line.startswith(f"syncnode_{name}") and not line.startswith("#"):
            series = line.split(" ")[0]
            if series == f"syncnode_{name}" or series.startswith(f"syncnode_{name}{{"):
                total += float(line.rsplit(" ", 1)[1])
    return total
