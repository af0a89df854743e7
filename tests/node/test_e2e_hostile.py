"""Hostile and outside peers against real node processes: all rejected, counted, survived."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.p2p import P2PError
from node.replication import topic_of
from node.replication.fetch import FETCH_PROTOCOL
from node.replication.recon import RECON_PROTOCOL
from sync.identity import peer_id_of
from sync.recon import MemoryKeyStore
from sync.recon.eventid import channel_bounds
from sync.recon.session import ReconSession
from sync.sds import SdsChannel, sds_pb2
from sync.transfer import BUSY_FRAME
from tests.harness.cluster import (
    channel_log,
    cluster,
    metric,
    preset_identity,
    publish_many,
    start_inproc,
    until,
    wait_for,
)
from tests.harness.hostile import Busy, hostile, meshed, while_busy
from tests.harness.inproc import InProcessNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
FAST_TIMEOUT = {"SYNCNODE_RECON_SESSION_TIMEOUT_S": "4"}


def forged_events(count: int) -> list[bytes]:
    """Valid SDS messages from a fresh key, then each one's signature altered."""
    key = Ed25519PrivateKey.generate()
    ch = SdsChannel("general", peer_id_of(key), key, now=time.time())
    out = []
    for i in range(count):
        msg = sds_pb2.Message.FromString(ch.send(f"forged {i}".encode(), time.time()))
        msg.signature = bytes([msg.signature[0] ^ 1]) + msg.signature[1:]
        out.append(msg.SerializeToString())
    return out


async def rejected(host: Any, peer: str, garbage: bytes) -> None:
    """Send ``garbage`` on a Recon stream; the node must reset it. A node answers BUSY while a
    session of its own with that peer runs (a round may pick this host; it serves no Recon, so
    that session fails within moments): then send it again."""
    async def once() -> None:
        async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
            await stream.send(garbage)
            try:
                answer = await stream.receive()
            except P2PError:
                return
        assert answer == BUSY_FRAME, answer
        raise Busy

    await while_busy(once)


async def attack(target: str) -> None:
    # Each attack comes from its own identity: a peer that breaks the protocol a few times is
    # banned (tests/node/test_hostile_transfer.py), and each of these must be rejected alone.
    async with hostile(target) as (host, peer):
        # 1. Garbage and truncated Recon frames.
        for garbage in (b"\x01\xff\xff\xff\xff", b"\x07nonsense", b"\x01"):
            await rejected(host, peer, garbage)
    async with hostile(target) as (host, peer):
        await rejected(host, peer, b"\x01")  # the node is not busy with a session of its own
        # 2. An oversized frame (5 MiB > the node's 4 MiB limit).
        # The node resets the stream on seeing the length prefix, maybe mid-send.
        with pytest.raises(P2PError):
            async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
                await stream.send(b"\x01" + b"\0" * (5 << 20))
                await stream.receive()
        # 3. A garbage fetch request.
        async with await host.open_stream(peer, FETCH_PROTOCOL) as stream:
            await stream.send(b"\xff" * 100)
            with pytest.raises(P2PError):
                await stream.receive()
    async with hostile(target) as (host, peer):
        # 4. Events with bad signatures, over gossip.
        topic = topic_of(1, "general")
        await host.subscribe(topic)
        await meshed(host, peer, topic)
        for wire in forged_events(5):
            await host.publish(topic, wire)
        # Bad signatures handed over directly: the forger is banned, and hung up on.
        await until(lambda: peer not in host.connected_peers(), 30, "the forger was not banned")
    async with hostile(target) as (host, peer):
        await rejected(host, peer, b"\x01")  # the node is not busy with a session of its own
        # 5. A Recon session that never ends: a valid first message, then silence. The node
        # hangs up (at its session timeout, 4 s, while the reconciliation waits for us) or
        # our read times out (10 s: with both key sets empty, the reconciliation ends at once
        # and the node waits in a transfer phase, which has only its read timeout; a node
        # holding events hangs up: tests/node/test_hostile_transfer.py).
        session = ReconSession.initiator(MemoryKeyStore(), [channel_bounds(1, "general")])
        async with await host.open_stream(peer, RECON_PROTOCOL) as stream:
            await stream.send(b"\x01" + session.start())
            await stream.receive()  # the node's answer
            with pytest.raises(P2PError), trio.fail_after(30):
                await stream.receive()


def test_hostile_peer_is_rejected_counted_and_harmless(tmp_path: Path) -> None:
    with cluster(tmp_path, 2, env=FAST_TIMEOUT, in_process=True) as nodes:
        target = nodes[0]
        trio.run(attack, target.listen_addrs[0])
        # The forger is banned after its second bad signature; the rest may never arrive.
        wait_for(lambda: metric(target, "events_rejected_total") >= 2, 20,
                 "forged events not counted")
        assert metric(target, "peer_bans_total") >= 1
        assert metric(target, "p2p_frame_errors_total") >= 1
        assert metric(target, "recon_errors_total") >= 4
        assert metric(target, "fetch_bad_requests_total") >= 1
        assert metric(target, "p2p_handler_errors_total") == 0  # nothing escaped a handler
        assert not any("forged" in (c or "") for _, _, c in channel_log(target, "general"))
        # The honest nodes keep syncing.
        publish_many(nodes[1], "general", [f"after-{k}" for k in range(20)])
        wait_for(lambda: len(channel_log(target, "general")) == 20, 30,
                 "honest sync stopped after the attack")
        assert isinstance(target, InProcessNode) and target.alive()


def test_allowed_peers_keeps_outsiders_out(tmp_path: Path) -> None:
    members = [preset_identity(tmp_path / "a"), preset_identity(tmp_path / "b")]
    closed = {"SYNCNODE_P2P_ALLOWED_PEERS": ",".join(members)}
    a = start_inproc(tmp_path, "a", env=closed)
    b = start_inproc(tmp_path, "b", env=closed, bootstrap=[a])
    outsider = start_inproc(tmp_path, "outsider", bootstrap=[a, b])
    try:
        assert [a.peer_id, b.peer_id] == members
        wait_for(lambda: len(a.get("/v1/peers")["connected"]) == 1, 30, "members not linked")
        result = outsider.cli("join", a.listen_addrs[0])
        assert result.returncode == 1
        assert "cannot connect" in result.stderr
        wait_for(lambda: metric(a, "p2p_refused_connections_total") >= 1
                 and metric(b, "p2p_refused_connections_total") >= 1, 30, "refusals not counted")
        assert [p["peer_id"] for p in a.get("/v1/peers")["connected"]] == [b.peer_id]
        publish_many(outsider, "general", [f"intruder-{k}" for k in range(10)])
        publish_many(a, "general", [f"member-{k}" for k in range(10)])
        wait_for(lambda: len(channel_log(b, "general")) == 10, 30, "members did not sync")
        # Two more Recon rounds on each member (and whatever redials and gossip meanwhile):
        # still nothing from the outsider.
        rounds = {n.peer_id: metric(n, "recon_sessions_total") for n in (a, b)}
        wait_for(lambda: all(metric(n, "recon_sessions_total") >= rounds[n.peer_id] + 2
                             for n in (a, b)), 30, "the members stopped reconciling")
        for node in (a, b):
            contents = {c for _, _, c in channel_log(node, "general")}
            assert contents == {f"member-{k}" for k in range(10)}
        assert outsider.get("/v1/peers")["connected"] == []
    finally:
        for node in (a, b, outsider):
            node.kill()
