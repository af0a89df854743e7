"""A hostile peer against the transfer protocols of real node processes: it withholds what it
advertised, asks for answers it never reads, inflates Recon key lists, and keeps breaking the
protocol. Each attack is rejected, counted and made to cost the attacker; the honest pair keeps
syncing, nothing acknowledged is lost and the victim's memory stays within its budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.p2p import P2PError, P2PHost, P2PTimeoutError
from node.replication.recon import RECON_PROTOCOL
from node.replication.recon_wire import BUSY, RECON
from sync.identity import peer_id_of
from sync.recon import MemoryKeyStore, ReconSession
from sync.recon.eventid import channel_bounds
from sync.sds import SdsChannel, sds_pb2
from tests.harness.cluster import (
    channel_log,
    cluster,
    metric,
    publish_many,
    start_node,
    until,
    wait_for,
)
from tests.harness.hostile import (
    Busy,
    amplify,
    hostile,
    key_list_bomb,
    peak_rss_mib,
    recon_and_serve,
    recon_and_withhold,
    recon_first_message,
    stored_ids,
    while_busy,
)
from tests.harness.procs import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# No SDS resends within a test: resending 60 MB of big events (up to max_resends times each)
# would swamp the victim's RSS figure with honest traffic, and this module measures attacks.
ENV = {"SYNCNODE_RECON_SESSION_TIMEOUT_S": "4", "SYNCNODE_RECON_GOSSIP_GRACE_S": "0",
       "SYNCNODE_SDS_RESEND_INTERVAL_S": "120"}
RSS_BUDGET_MIB = 512
GOSSIP_CACHE_S = 12


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    """The victim (nodes[0]) and an honest peer, shared by the tests of this module."""
    with cluster(tmp_path_factory.mktemp("hostile"), 2, env=ENV) as nodes:
        yield nodes


def _contents(node: NodeProcess) -> set[str]:
    return {c for _, _, c in channel_log(node, "general")}


def test_withheld_keys_are_fetched_from_someone_else(tmp_path: Path,
                                                     pair: list[NodeProcess]) -> None:
    honest = pair[1]
    acked = publish_many(honest, "general", [f"withheld-{k}" for k in range(300)])
    published = time.monotonic()
    # Started after the publishes (no peers: gossip cannot help it), so that its start-up
    # passes within the wait for libp2p's message cache below.
    victim = start_node(tmp_path, "isolated", env=ENV)
    try:

        async def attack() -> tuple[int, int]:
            async with hostile(honest.listen_addrs[0]) as (host, peer):
                keys, _ = await recon_and_withhold(host, peer, [])  # learn the real keys
            async with hostile(victim.listen_addrs[0]) as (host, peer):
                _, wanted = await recon_and_withhold(host, peer, keys)
            return len(keys), wanted

        advertised, wanted = trio.run(attack)
        assert advertised >= 300 and wanted >= 300  # the victim fell for it
        # The victim takes in the (empty) answer after the attacker has left.
        wait_for(lambda: metric(victim, "recon_keys_withheld_total") >= 300, 10,
                 "withheld keys not counted")
        assert metric(victim, "peer_penalties_total") >= 1
        # Past libp2p's message cache (IHAVE/IWANT would hand the victim the fresh events):
        # from here on only Recon can deliver them.
        time.sleep(max(0.0, published + GOSSIP_CACHE_S - time.monotonic()))
        started = time.monotonic()
        # `syncnode join`'s API call (the CLI is tested in test_join.py, test_cli_*.py).
        victim.post("/v1/peers", {"multiaddr": honest.listen_addrs[0]})
        wait_for(lambda: {f"withheld-{k}" for k in range(300)} <= _contents(victim), 30,
                 "withheld events not fetched from the honest peer")
        elapsed = time.monotonic() - started
        assert elapsed < 30
        assert metric(victim, "recon_claims") == 0  # nothing left claimed for good
        got = {m for _, m, _ in channel_log(victim, "general")}
        assert set(acked) <= got
    finally:
        victim.kill()


def test_unread_answers_do_not_grow_memory(pair: list[NodeProcess]) -> None:
    victim, honest = pair
    # 120 events of ~500 KB: every answer below would be ~60 MB if loaded at once. The honest
    # peer publishes them (a publisher's own unacknowledged events are its own memory cost).
    big = "x" * (500 * 1024)
    ids = publish_many(honest, "general", [f"big-{k}-{big}" for k in range(120)], threads=4)
    wait_for(lambda: set(ids) <= stored_ids(victim), 60, "victim did not get the big events")
    assert victim.proc is not None
    before = peak_rss_mib(victim.proc.pid)

    accepted, wanted = trio.run(amplify, victim.listen_addrs[0], ids, 8.0)
    assert wanted >= 120
    assert accepted <= 2  # the per-peer cap on fetch streams
    assert metric(victim, "fetch_refused_total") >= 6
    peak = peak_rss_mib(victim.proc.pid)
    assert peak <= RSS_BUDGET_MIB, f"victim peak RSS {peak:.0f} MiB (was {before:.0f})"
    # The honest pair keeps syncing.
    acked = publish_many(honest, "general", [f"after-big-{k}" for k in range(20)])
    wait_for(lambda: set(acked) <= stored_ids(victim), 30, "honest sync stopped after the attack")


def test_key_list_bomb_is_rejected_and_counted(pair: list[NodeProcess]) -> None:
    victim = pair[0]
    bomb = key_list_bomb()
    assert 400_000 < len(bomb) < 1_000_000

    async def attack() -> None:
        async with hostile(victim.listen_addrs[0]) as (host, peer):
            with pytest.raises(P2PError):  # the victim resets the stream
                await recon_first_message(host, peer, bomb)

    before = metric(victim, "recon_protocol_errors_total")
    trio.run(attack)
    wait_for(lambda: metric(victim, "recon_protocol_errors_total") > before, 10,
             "key-list bomb not counted")
    assert metric(victim, "recon_missing_dropped_total") == 0  # rejected before any key held
    assert metric(victim, "recon_claims") == 0
    wait_for(lambda: metric(victim, "recon_sessions_open") == 0, 10,
             "the failed session is still open in the core")


def test_a_stalled_reconciliation_ends_at_the_session_deadline(pair: list[NodeProcess]) -> None:
    """A peer that answers the first round and then says nothing holds the victim's session
    only until recon.session_timeout_s (4 s here), not the 30 s read timeout: the deadline is
    the exchange core's timer, and the driver hangs up when it fires."""
    victim = pair[0]
    publish_many(victim, "general", [f"for-the-staller-{k}" for k in range(40)])
    lo, _hi = channel_bounds(1, "general")
    ours = MemoryKeyStore.from_sorted(sorted(lo + i.to_bytes(4, "big") for i in range(1, 400)))

    async def stall_once(host: P2PHost, peer: str) -> float:
        async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
            session = ReconSession.initiator(ours, [channel_bounds(1, "general")])
            await stream.send(bytes([RECON]) + session.start())
            reply = await stream.receive()
            if reply == bytes([BUSY]):
                raise Busy
            # The victim's answer needs ours (there is one to send, even when it would end our
            # side of the session): it waits for a frame that never comes.
            assert session.receive(reply[1:]) is not None
            # The victim's session waits for us: the core holds it open.
            assert await trio.to_thread.run_sync(metric, victim, "recon_sessions_open") >= 1
            began = time.monotonic()
            with pytest.raises(P2PError) as hung_up:  # closed or reset, not timed out
                await stream.receive()
            assert not isinstance(hung_up.value, P2PTimeoutError)
            return time.monotonic() - began

    async def stall() -> float:
        async with hostile(victim.listen_addrs[0]) as (host, peer):
            return await while_busy(lambda: stall_once(host, peer))

    before = metric(victim, 'recon_errors_total{kind="TooSlowError"}')
    waited = trio.run(stall)
    assert waited < 9, f"the victim held the stalled session {waited:.1f} s"
    wait_for(lambda: metric(victim, 'recon_errors_total{kind="TooSlowError"}') > before, 10,
             "session timeout not counted")
    # The core forgot the session it aborted (the honest peer's sessions come and go).
    wait_for(lambda: metric(victim, "recon_sessions_open") == 0, 10,
             "the aborted session is still open in the core")


def test_repeat_offender_is_banned_and_refused(pair: list[NodeProcess]) -> None:
    victim, honest = pair

    async def attack() -> None:
        async with hostile(victim.listen_addrs[0]) as (host, peer):
            for _ in range(6):
                try:
                    async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
                        await stream.send(b"\x07nonsense")
                        await stream.receive()
                except P2PError:
                    pass  # reset, or refused once banned
            await until(lambda: peer not in host.connected_peers(), 30,
                        "the victim did not hang up on us")
            with pytest.raises(P2PError):
                await host.connect(victim.listen_addrs[0])  # and refuses us

    bans = metric(victim, "peer_bans_total")
    trio.run(attack)
    assert metric(victim, "peer_bans_total") == bans + 1
    assert metric(victim, "p2p_refused_banned_total") >= 1
    assert metric(victim, "peers_banned") >= 1
    # The honest pair is untouched and keeps syncing; nothing acknowledged went missing.
    acked = publish_many(honest, "general", [f"after-ban-{k}" for k in range(20)])
    wait_for(lambda: set(acked) <= stored_ids(victim), 30, "honest sync stopped after the ban")
    assert [p["peer_id"] for p in victim.get("/v1/peers")["connected"]] == [honest.peer_id]
    assert victim.proc is not None and victim.proc.poll() is None
    # Handlers ended by the ban's disconnect count as handler errors; none may be a bug.
    assert " raised" not in victim.stderr_path.read_text()


def _signed_events(count: int, forged: int) -> list[bytes]:
    """``count`` events of one sender, written an hour ago; event ``forged`` has a bad
    signature."""
    key = Ed25519PrivateKey.generate()
    ch = SdsChannel("general", peer_id_of(key), key, now=time.time() - 3600)
    wires = [ch.send(f"served-{i}".encode(), time.time() - 3600 + i) for i in range(count)]
    msg = sds_pb2.Message.FromString(wires[forged])
    msg.signature = bytes([msg.signature[0] ^ 1]) + msg.signature[1:]
    wires[forged] = msg.SerializeToString()
    return wires


def test_forged_events_in_a_recon_answer_are_rejected_and_charged(
        pair: list[NodeProcess]) -> None:
    """The node finds the bad signature (in its ingest workers, or inline for a small
    answer); it counts the event, charges the peer that served it, ends the session and
    stores nothing it did not verify."""
    victim = pair[0]
    rejected = metric(victim, "events_rejected_total")
    penalties = metric(victim, "peer_penalties_total")
    wires = _signed_events(50, forged=10)

    async def attack() -> int:
        async with hostile(victim.listen_addrs[0]) as (host, peer):
            return await recon_and_serve(host, peer, wires)

    # The node asked for the forged event (the 11th) and stopped when its answer failed (its
    # first want lists are small: it may end before asking for all 50).
    assert 11 <= trio.run(attack) <= 50
    wait_for(lambda: metric(victim, "events_rejected_total") > rejected, 20,
             "the forged event was not counted")
    assert metric(victim, "peer_penalties_total") > penalties
    assert "bad signature" in victim.get("/metrics")
    assert metric(victim, "ingest_workers") == 2
    contents = _contents(victim)
    assert "served-10" not in contents
    assert victim.get("/healthz")
