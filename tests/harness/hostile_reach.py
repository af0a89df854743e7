"""Hostile libp2p hosts against reachability, the relay service, liveness and the connection
manager: for the hostile-peer tests and the attack benchmark (scripts/bench/attack_reach.py).
Every host here is a real py-libp2p host with Noise, on 127.0.0.1, with a fresh key."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.abc import INetStream
from libp2p.host.ping import ID as PING_PROTOCOL_ID

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig, P2PError, P2PHost
from node.p2p.dialback import DIALBACK_PROTOCOL
from node.p2p.run import open_host
from node.replication import topic_of
from sync.reachability import ReachabilityConfig
from tests.harness.cluster import metric, wait_for
from tests.harness.procs import NodeApi

__all__ = ["SQUAT_HONEST_ENV", "SQUAT_VICTIM_ENV", "dialback_liars", "dialled_by",
           "grab_reservations", "honest_connected", "late_pingers", "lie_to", "mesh_squatters",
           "squat", "stall_pings"]

PING_BYTES = 32


@asynccontextmanager
async def _hosts(target: str, count: int, config: P2PConfig | None = None
                 ) -> AsyncIterator[list[P2PHost]]:
    """``count`` fresh identities in this process, each connected to ``target``."""
    async with AsyncExitStack() as stack:
        hosts: list[P2PHost] = []
        for _ in range(count):
            host = await stack.enter_async_context(
                open_host(Ed25519PrivateKey.generate(), config or P2PConfig(), clock=SystemClock()))
            await host.connect(target)
            hosts.append(host)
        yield hosts


@asynccontextmanager
async def dialback_liars(target: str, count: int, claim: str = "198.18.0.99"
                         ) -> AsyncIterator[list[int]]:
    """``count`` identities that answer every dial-back request with ``ok <claim>`` without
    dialling anything (issue 38, finding 1). Yields the number of requests each answered."""
    answered = [0] * count

    def liar(index: int):  # type: ignore[no-untyped-def]
        async def handle(stream: FramedStream) -> None:
            await stream.receive()  # the requester's listen port
            await stream.send(f"ok {claim}".encode())
            answered[index] += 1
        return handle

    async with AsyncExitStack() as stack:
        for i in range(count):
            host = await stack.enter_async_context(
                open_host(Ed25519PrivateKey.generate(), P2PConfig(), clock=SystemClock()))
            # Served before connecting: the node asks as soon as it sees the connection.
            host.set_stream_handler(DIALBACK_PROTOCOL, liar(i))
            await host.connect(target)
        yield answered


async def grab_reservations(target: str, relay_peer: str, identities: int) -> int:
    """``identities`` fresh identities from this process each ask ``target`` (serving as a
    relay) for a reservation, holding every connection until all have asked; returns how many
    were granted (issue 38, finding 4: 32 of 34)."""
    config = P2PConfig(reachability=ReachabilityConfig())
    granted = 0
    async with _hosts(target, identities, config) as hosts:
        for host in hosts:
            assert host.relay is not None
            granted += await host.relay.reserve(relay_peer, 10)
    return granted


@asynccontextmanager
async def late_pingers(target: str, count: int, delay_s: float | None
                       ) -> AsyncIterator[list[P2PHost]]:
    """``count`` identities whose libp2p ping handler answers ``delay_s`` late (None: reads
    the ping and never answers), connected to ``target``: a liveness probe (issue 38, 6a)."""

    async def stall(stream: INetStream) -> None:
        try:
            while True:
                data = await stream.read(PING_BYTES)
                if not data:
                    return
                if delay_s is None:
                    await trio.sleep_forever()
                await trio.sleep(delay_s)
                await stream.write(data)
        except Exception:
            return

    async with AsyncExitStack() as stack:
        hosts: list[P2PHost] = []
        for _ in range(count):
            host = await stack.enter_async_context(
                open_host(Ed25519PrivateKey.generate(), P2PConfig(), clock=SystemClock()))
            host.libp2p_host.set_stream_handler(PING_PROTOCOL_ID, stall)
            await host.connect(target)
            hosts.append(host)
        yield hosts


@asynccontextmanager
async def mesh_squatters(target: str, count: int, topics: list[str]
                         ) -> AsyncIterator[list[P2PHost]]:
    """``count`` identities that connect to ``target`` and join its GossipSub mesh of each of
    ``topics`` (mesh members are protected from pruning): an eclipse probe (issue 38, 6b)."""
    async with AsyncExitStack() as stack:
        hosts: list[P2PHost] = []
        for _ in range(count):
            host = await stack.enter_async_context(
                open_host(Ed25519PrivateKey.generate(), P2PConfig(), clock=SystemClock()))
            for topic in topics:
                await host.subscribe(topic)
            try:
                await host.connect(target)
            except P2PError:
                continue  # refused (the node's inbound limits): the others still try
            hosts.append(host)
        yield hosts


async def _poll(condition: Callable[[], bool], timeout: float, message: str) -> None:
    """``wait_for`` without blocking the hostile hosts' event loop."""
    await trio.to_thread.run_sync(wait_for, condition, timeout, message)


async def lie_to(node: NodeApi, liars: int) -> dict[str, float]:
    """``liars`` dial-back liars connect to ``node``; once it weighed every answer (counted
    lies or, on d9bdd2e, believed them), its reachability gauges and the charges."""
    async with dialback_liars(node.listen_addrs[0], liars) as answered:
        await _poll(lambda: all(answered), 60, f"not every liar was asked: {answered}")
        await _poll(lambda: metric(node, "dialback_lies_total") >= liars
                    or metric(node, "reachability_state") == 2,
                    60, "the node never weighed the answers")
        seen = {name: metric(node, name) for name in (
            "reachability_state", "relay_serving", "dialback_lies_total")}
        seen["penalties"] = metric(node, 'peer_penalties_total{reason="dialback_lie"}')
        return seen


def honest_connected(node: NodeApi, honest: set[str]) -> int:
    return len(honest & {p["peer_id"] for p in node.get("/v1/peers")["connected"]})


#: The eclipse probe's victim: watermarks small enough that a dozen identities are far above
#: the high one. Its honest peers are content with one connection (they hold each other), so
#: they do not redial a victim that pruned them, as peers with many others would not either.
SQUAT_VICTIM_ENV = {"SYNCNODE_MEMBERSHIP_LOW_WATERMARK": "2",
                    "SYNCNODE_MEMBERSHIP_HIGH_WATERMARK": "6", "SYNCNODE_MEMBERSHIP_GRACE_S": "1"}
SQUAT_HONEST_ENV = {"SYNCNODE_MEMBERSHIP_LOW_WATERMARK": "1"}


def dialled_by(victim: NodeApi, honest: Sequence[NodeApi]) -> set[str]:
    """The honest nodes join the first of them and ``victim`` dials each; their ids once it
    holds them all."""
    # ``syncnode join``'s API call: a CLI process per join would cost its start-up each.
    for h in honest[1:]:
        h.post("/v1/peers", {"multiaddr": honest[0].listen_addrs[0]})
    for h in honest:
        victim.post("/v1/peers", {"multiaddr": h.listen_addrs[0]})
    ids = {h.peer_id for h in honest}
    wait_for(lambda: honest_connected(victim, ids) == len(ids), 60, "honest peers not joined")
    return ids


async def _watch(victim: NodeApi, honest: set[str], window_s: float,
                 over: Callable[[], bool] = lambda: False) -> tuple[int, int]:
    """(the fewest of ``honest`` the victim held, how often one of them dropped) over
    ``window_s`` or until the attack is ``over``, sampled twice a second."""
    held = fewest = await trio.to_thread.run_sync(honest_connected, victim, honest)
    drops = 0
    deadline = trio.current_time() + window_s
    while trio.current_time() < deadline:
        await trio.sleep(0.5)
        now_held = await trio.to_thread.run_sync(honest_connected, victim, honest)
        drops += max(0, held - now_held)
        held, fewest = now_held, min(fewest, now_held)
        if await trio.to_thread.run_sync(over):
            break
    return fewest, drops


async def squat(victim: NodeApi, honest: set[str], identities: int,
                window_s: float, rounds: int | None = None) -> tuple[int, int]:
    """``identities`` join the victim's GossipSub mesh of ``general`` while it holds
    ``honest`` (peers it dialled); returns (the fewest honest peers it held over ``window_s``
    once pruning began, or until it pruned again in ``rounds`` more housekeeping rounds, how
    many squatters connected)."""
    pruned = "membership_pruned_total"
    async with mesh_squatters(victim.listen_addrs[0], identities,
                              [topic_of(1, "general")]) as squatters:
        await _poll(lambda: metric(victim, pruned) > 0, 60, "the victim never pruned")
        seen = [metric(victim, pruned)]

        def pruned_again() -> bool:
            # A round that prunes moves the counter once (its closes go together); the
            # rounds are membership.housekeeping_interval_s apart, wider than our samples.
            if (now := metric(victim, pruned)) > seen[-1]:
                seen.append(now)
            return rounds is not None and len(seen) > rounds

        fewest, _drops = await _watch(victim, honest, window_s, pruned_again)
        return fewest, len(squatters)


async def stall_pings(victim: NodeApi, honest: set[str], identities: int,
                      window_s: float, late_s: float, settle_s: float = 6.0
                      ) -> tuple[int, int]:
    """Half of ``identities`` never answer the victim's pings, half answer ``late_s`` late;
    returns (how often an honest connection dropped over ``window_s``, liveness closes).
    The window ends early once liveness closed every silent one and ``settle_s`` more passed:
    what the closes themselves do has happened by then (a close drops its connections within
    5 s, node.replication.membership's bound; the next default ping round has gone out to the
    honest peer). Honest pings that failed from the start would have had it closed with the
    silent ones, in the same rounds."""
    target = victim.listen_addrs[0]
    silent = identities - identities // 2
    closes = "membership_liveness_closed_total"
    before = metric(victim, closes)
    closed_at: list[float] = []

    def over() -> bool:
        if not closed_at and metric(victim, closes) - before >= silent:
            closed_at.append(time.monotonic())
        return bool(closed_at) and time.monotonic() - closed_at[0] >= settle_s

    async with late_pingers(target, silent, None), late_pingers(target, identities // 2, late_s):
        _fewest, drops = await _watch(victim, honest, window_s, over)
        return drops, int(metric(victim, closes) - before)
