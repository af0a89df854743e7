"""The metrics a peer's behaviour moves, each driven over real libp2p against real nodes
(in this process) and read from their ``/metrics``. A crafted peer (a real py-libp2p host in this
process that signs real SDS messages) asks the node for an event by id, sends an event twice,
leaves gaps for the node to fetch by id and answers those fetches well, not at all, with a
reset and with too much; holds a message of the node's in its bloom filter only; sends an
unsigned message whose sender id the log cannot store; stalls a stream; opens a second Recon
session while one is open; serves a Recon fetch whose dependency never comes and stalls
another until its claim lapses (which gets it banned, so it goes last). A closed-group node
behind the first one refuses the crafted peer's relayed gossip and has no queue room for any,
and a dead bootstrap address fails to dial.

The nodes and the crafted peer are shared by one test so that the module costs seconds."""

from __future__ import annotations

import random
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig, P2PHost
from node.p2p.run import open_host
from node.replication import topic_of
from node.replication.fetch import FETCH_PROTOCOL
from node.replication.recon import RECON_PROTOCOL
from node.replication.recon_wire import BUSY, RECON
from sync.identity import peer_id_of
from sync.recon import MemoryKeyStore
from sync.recon.eventid import channel_bounds
from sync.recon.session import ReconSession
from sync.sds import SdsChannel, SdsConfig, SignedEvent
from sync.sds.message import decode_event, decode_transmission
from sync.stored_event import record_of_event
from sync.transfer import encode_request, parse_request
from tests.harness.cluster import (
    metric,
    preset_identity,
    start_inproc,
    until,
    wait_for,
)
from tests.harness.hostile import recon_and_answer
from tests.harness.procs import NodeApi

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
READ_TIMEOUT_S = 5
CLAIM_TIMEOUT_S = 1.5


def recon_key(event: SignedEvent) -> bytes:
    return record_of_event(1, event).recon_key


def dead_address() -> str:
    """A multiaddr nothing listens on, with a well-formed peer id."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"/ip4/127.0.0.1/tcp/{port}/p2p/{peer_id_of(Ed25519PrivateKey.generate())}"


class CraftedPeer:
    """Signs SDS messages of its own on ``general`` and answers fetches as ``mode`` says."""

    def __init__(self, host: P2PHost, key: Ed25519PrivateKey) -> None:
        self.host = host
        # A history of one: the message before is named, anything older only in the bloom.
        self.channel = SdsChannel("general", host.peer_id, key, SdsConfig(causal_history_size=1),
                                  random.Random(7), time.time())
        self.wires: dict[str, bytes] = {}
        self.mode = "serve"
        self.asked: list[list[str]] = []
        self.serve_fetches(True)

    def serve_fetches(self, serve: bool) -> None:
        if serve:
            self.host.set_stream_handler(FETCH_PROTOCOL, self._answer)
        else:  # the protocol is then refused in negotiation
            self.host.remove_stream_handler(FETCH_PROTOCOL)

    def message(self, content: bytes) -> tuple[str, bytes]:
        """A new message: its id and what goes on the wire (gossiped or not)."""
        data = self.channel.send(content, time.time())
        self.channel.events()
        event = decode_transmission(data).event
        self.wires[event.message_id] = event.wire
        return event.message_id, data

    async def gossip(self, data: bytes) -> None:
        await self.host.publish(topic_of(1, "general"), data)

    async def _answer(self, stream: FramedStream) -> None:
        ids = parse_request(await stream.receive(), 256)
        self.asked.append(ids)
        if self.mode == "reset":
            await stream.reset()
            return
        for mid in ids:
            wire = self.wires[mid]
            # "extra": more events than ids asked, which the protocol forbids.
            for _ in range(2 if self.mode == "extra" else 1):
                await stream.send(wire)
        await stream.send(b"")
        await stream.close()


def test_peer_behaviour_moves_its_metrics(tmp_path: Path) -> None:
    a_id = preset_identity(tmp_path / "a")
    closed = start_inproc(tmp_path, "closed", env={
        "SYNCNODE_P2P_ALLOWED_PEERS": a_id,
        # No sync messages: they would acknowledge a's probe below before the crafted peer can.
        "SYNCNODE_SDS_SYNC_INTERVAL_S": "600",
        # Room for no gossip message at all: each one overflows this node's queue.
        "SYNCNODE_P2P_GOSSIP_QUEUE_BYTES": "16"})
    a = start_inproc(tmp_path, "a", "--bootstrap", dead_address(), bootstrap=[closed],
                         env={"SYNCNODE_P2P_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
                              "SYNCNODE_P2P_CHANNELS": "general,wk",
                              "SYNCNODE_SDS_CHANNEL_PROFILES": "wk=waku",
                              "SYNCNODE_RECON_CLAIM_TIMEOUT_S": str(CLAIM_TIMEOUT_S),
                              # Fresh events are fetched at once, and one key per session.
                              "SYNCNODE_RECON_GOSSIP_GRACE_S": "0",
                              "SYNCNODE_RECON_MAX_MISSING_KEYS": "1"})
    nodes = {"a": a, "closed": closed}
    try:
        wait_for(lambda: closed.peer_id in [p["peer_id"] for p in a.get("/v1/peers")["connected"]],
                 30, "a did not connect to the closed node")
        before = {(n, m): metric(node, m) for n, node in nodes.items() for m in WATCHED[n]}
        # Gossiped to the closed node too, whose queue has no room for it.
        seed = a.post("/v1/channels/general/events", {"content": "seed"})["message_id"]
        trio.run(_drive, a, seed)

        def still() -> list[str]:
            return [f"{n}:{m}" for n, node in nodes.items() for m in WATCHED[n]
                    if metric(node, m) <= before[(n, m)]]

        wait_for(lambda: not still(), 30, lambda: f"these metrics did not move: {still()}")
        # Dialled at start-up (before any baseline could be read) and again with back-off.
        assert metric(a, "peer_dial_failures_total") >= 1
        assert metric(a, "peer_scores_tracked") >= 1  # the wrong answer cost the peer
    finally:
        a.kill()
        closed.kill()


WATCHED = {
    "a": ["fetch_served_total", "events_duplicate_total", "fetch_received_total",
          "fetch_failures_total", "fetch_bad_answers_total", "p2p_timeouts_total",
          # The stalled fetch ends its handler with the timeout.
          "p2p_handler_errors_total",
          "p2p_stream_open_failures_total", "recon_sessions_declined_total",
          "p2p_connections_closed_total", "events_store_failed_total"],
    "closed": ["p2p_gossip_refused_foreign_total", "p2p_gossip_dropped_overflow_total"],
}


def _sql(node: NodeApi, statement: str) -> None:
    with sqlite3.connect(node.data_dir / "syncnode.db", timeout=30) as conn:
        conn.execute(statement)


async def _until(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    await until(lambda: trio.to_thread.run_sync(check), timeout, what)


async def _drive(a: NodeApi, seed: str) -> None:
    key = Ed25519PrivateKey.generate()
    async with open_host(key, P2PConfig(read_timeout=10), clock=SystemClock()) as host:
        peer = CraftedPeer(host, key)
        target = await host.connect(a.listen_addrs[0])
        # Subscriptions exchanged: our gossip on both of a's channels reaches a.
        await until(lambda: all(target in host.gossip_peers(topic_of(1, c))
                                for c in ("general", "wk")), 30, "a's subscriptions not seen")

        def moved(name: str, base: float) -> Callable[[], bool]:
            return lambda: metric(a, name) > base

        async def step(name: str, action: Callable[[], Awaitable[None]]) -> None:
            base = await trio.to_thread.run_sync(metric, a, name)
            await action()
            await _until(moved(name, base), f"{name} did not move")

        async def fetch(mid: str) -> bytes:
            async with await host.open_stream(target, FETCH_PROTOCOL) as stream:
                await stream.send(encode_request([mid]))
                wire = await stream.receive()
                assert await stream.receive() == b""
            return wire

        # Asked by id, a answers with its event.
        async def ask() -> None:
            assert decode_event(await fetch(seed)).content == b"seed"
        await step("fetch_served_total", ask)

        # One message twice: the second is a duplicate, dropped.
        _mid, once = peer.message(b"twice")

        async def twice() -> None:
            delivered = await trio.to_thread.run_sync(metric, a, "events_delivered_total")
            await peer.gossip(once)
            await _until(moved("events_delivered_total", delivered), "the first copy was lost")
            await peer.gossip(once)
        await step("events_duplicate_total", twice)

        # A gap: a fetches the message it missed from us, then fails to open the stream (we
        # stopped serving fetches), then breaks on our reset, then on an answer with more
        # events than it asked for.
        for mode, name in (("serve", "fetch_received_total"),
                           ("refuse", "p2p_stream_open_failures_total"),
                           ("reset", "fetch_failures_total"),
                           ("extra", "fetch_bad_answers_total")):
            peer.mode = mode
            peer.serve_fetches(mode != "refuse")
            missed, _unsent = peer.message(f"missed ({mode})".encode())
            _mid, later = peer.message(f"after the gap ({mode})".encode())

            async def gap(later: bytes = later) -> None:
                await peer.gossip(later)
            failures = await trio.to_thread.run_sync(metric, a, "fetch_failures_total")
            await step(name, gap)
            if mode == "refuse":
                # The gap also prompts a Recon session with us at once, and we serve no Recon:
                # that refused stream moves the counter too, before the fetch (which waits for
                # its grace). The round ends with the refused fetch (a failed fetch), else it
                # would run in the next round and answer that round's check in its place.
                await _until(moved("fetch_failures_total", failures),
                             "the refused fetch was not counted as failed")
                assert not any(missed in ids for ids in peer.asked)
            assert mode == "refuse" or any(missed in ids for ids in peer.asked)

        # Possibly acknowledged: a has heard two other senders, so the bloom filter of one
        # holding a's message is evidence, not yet an acknowledgement.
        other = Ed25519PrivateKey.generate()
        second = SdsChannel("general", peer_id_of(other), other, SdsConfig(),
                            random.Random(8), time.time())
        await peer.gossip(second.send(b"a second sender", time.time()))

        async def probe_in_bloom_only() -> None:
            probe = await trio.to_thread.run_sync(
                lambda: a.post("/v1/channels/general/events", {"content": "probe"}))
            peer.channel.receive_event(decode_event(await fetch(probe["message_id"])),
                                       time.time())
            peer.message(b"names the probe")  # never gossiped
            _mid, later = peer.message(b"names the message before; the probe is in its bloom")
            await peer.gossip(later)
        await step("sds_possibly_acknowledged_total", probe_in_bloom_only)

        # Recon: an event a fetches from us waits for a dependency nobody can give it (we
        # stopped serving fetches), so its key stays held.
        async def held() -> None:
            _missed, _unsent = peer.message(b"missed, for Recon")
            later = decode_transmission(peer.message(b"fetched by Recon")[1]).event

            async def deliver(want: list[bytes]) -> list[bytes]:
                return [later.wire] if want == [recon_key(later)] else []
            peer.serve_fetches(False)
            await recon_and_answer(host, target, [recon_key(later)], deliver)
        await step("recon_claims_held", held)
        peer.serve_fetches(True)

        # Unsigned (waku profile), the sender names itself: a name longer than the log's
        # sender column (128) is refused by the decoder, counted, never delivered.
        waku = SdsChannel("wk", "s" * 200, None, SdsConfig(profile="waku"), random.Random(9),
                          time.time(), False)

        async def long_sender() -> None:
            await host.publish(topic_of(1, "wk"), waku.send(b"from a long name", time.time()))
        await step("events_rejected_total", long_sender)
        await _until(lambda: 'reason="malformed message"' in a.get("/metrics"),
                     "the long sender's rejection was not counted with its reason")

        # A database that refuses the insert (a trigger stands for a full disk or a broken
        # database): the delivered event is not stored, its delivery undone and counted.
        waku = SdsChannel("wk", "shortname", None, SdsConfig(profile="waku"), random.Random(9),
                          time.time(), False)

        async def refused_by_the_database() -> None:
            await trio.to_thread.run_sync(_sql, a, "CREATE TRIGGER refuse_wk BEFORE INSERT ON "
                                          "events WHEN NEW.channel = 'wk' BEGIN SELECT "
                                          "RAISE(ABORT, 'refused by the test'); END")
            await host.publish(topic_of(1, "wk"), waku.send(b"refused", time.time()))
        await step("events_store_failed_total", refused_by_the_database)
        await trio.to_thread.run_sync(_sql, a, "DROP TRIGGER refuse_wk")

        # A fetch request that never comes: a's read times out.
        async def stall() -> None:
            timeouts = await trio.to_thread.run_sync(metric, a, "p2p_timeouts_total")
            async with await host.open_stream(target, FETCH_PROTOCOL):
                await _until(moved("p2p_timeouts_total", timeouts), "a's read did not time out",
                             READ_TIMEOUT_S + 20)
        await step("p2p_timeouts_total", stall)

        # A second Recon session while the first is open is declined.
        async def second_session() -> None:
            async with await host.open_stream(target, RECON_PROTOCOL) as first:
                session = ReconSession.initiator(MemoryKeyStore(), [channel_bounds(1, "general")])
                await first.send(bytes([RECON]) + session.start())
                await first.receive()  # a answered: its session with us is open
                async with await host.open_stream(target, RECON_PROTOCOL) as again:
                    assert await again.receive() == bytes([BUSY])
        await step("recon_sessions_declined_total", second_session)

        # Last (it costs us our standing: a bans us): two keys a lacks where it takes one per
        # session; the one it claims we never send, and its claim lapses while we stall.
        async def stalled() -> None:
            events = [decode_transmission(peer.message(f"stalled {i}".encode())[1]).event
                      for i in range(2)]
            lapsed = await trio.to_thread.run_sync(metric, a, "recon_claims_lapsed_total")

            async def stall_answer(want: list[bytes]) -> list[bytes]:
                assert len(want) == 1
                assert await trio.to_thread.run_sync(metric, a, "recon_claims") >= 1
                await _until(moved("recon_claims_lapsed_total", lapsed), "no claim lapsed",
                             READ_TIMEOUT_S - 0.5)
                return []
            await recon_and_answer(host, target, sorted(recon_key(e) for e in events),
                                   stall_answer)
        await step("recon_missing_dropped_total", stalled)


BURST_HOSTS = 12


async def _connection_bursts(node: NodeApi, rounds: int) -> None:
    """Rounds of BURST_HOSTS real hosts that connect at once and leave together."""
    for _ in range(rounds):
        if await trio.to_thread.run_sync(metric, node, "p2p_peer_events_dropped_total") > 0:
            return
        connected: list[str] = []

        async def visit(connected: list[str] = connected) -> None:
            async with open_host(Ed25519PrivateKey.generate(), P2PConfig(),
                                 clock=SystemClock()) as host:
                connected.append(await host.connect(node.listen_addrs[0]))
                # Everybody leaves together, once the last one is in.
                await until(lambda: len(connected) == BURST_HOSTS, 30,
                            "a visitor did not connect")
        async with trio.open_nursery() as nursery:
            for _ in range(BURST_HOSTS):
                nursery.start_soon(visit)


def test_connection_notices_beyond_the_queue_are_dropped_and_counted(tmp_path: Path) -> None:
    # A queue of one notice per watching service: a burst of connections overflows it.
    node = start_inproc(tmp_path, "a", env={"SYNCNODE_P2P_PEER_EVENT_QUEUE": "1"})
    try:
        assert metric(node, "p2p_peer_events_dropped_total") == 0
        trio.run(_connection_bursts, node, 10)
        assert metric(node, "p2p_peer_events_dropped_total") > 0
        assert node.status()["peer_id"] == node.peer_id  # dropped notices, a node still serving
    finally:
        assert node.terminate() == 0, node.log_tail()
