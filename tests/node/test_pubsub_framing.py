"""Pubsub RPC framing between honest real py-libp2p hosts under a full Yamux window (issue 31).

py-libp2p 0.8.1 writes one pubsub RPC with ``YamuxStream.write``, which takes the stream's
write lock per frame only: when the send window runs out mid-RPC (a slow receiver, an RPC
larger than the window) the writer waits for credit, and any other writer on the same stream
gets its frames in between. Several libp2p tasks write to a peer's pubsub stream: the per-peer
send loop and, outside it, ``flush_pending_messages`` and ``send_recent_messages`` (the
replay of recent messages when a peer (re)subscribes or its stream is re-established). The
receiver then reads an RPC made of two RPCs' bytes and drops the stream as "malformed"
(41-82 times per overloaded cluster_bench run). ``GuardedPubsub.write_msg`` writes a whole
RPC under a per-stream lock
(``node.p2p.pubsub_guard``).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2

from node.p2p import P2PConfig, P2PHost
from node.p2p.run import open_host

TOPIC = "framing-test"


async def _linked(sender: P2PHost, receiver: P2PHost) -> tuple[Any, Any, ID]:
    """Both subscribed to TOPIC and connected: the receiver's inbox, the sender's libp2p
    Pubsub and the receiver's peer id."""
    inbox = await receiver.subscribe(TOPIC)
    await sender.subscribe(TOPIC)
    await sender.connect(receiver.listen_addrs[0])
    return inbox, sender._gossip._pubsub, ID.from_base58(receiver.peer_id)


@pytest.mark.trio
@pytest.mark.timeout(120)
async def test_concurrent_rpc_writes_to_one_peer_arrive_whole(
        caplog: pytest.LogCaptureFixture) -> None:
    keys = [Ed25519PrivateKey.from_private_bytes(bytes([70 + i]) * 32) for i in range(2)]
    # Unsigned test messages (the framing, not the signing, is under test).
    config = P2PConfig(gossip_strict_signing=False)
    async with open_host(keys[0], config) as sender, \
            open_host(keys[1], config) as receiver:
        inbox, pubsub, peer = await _linked(sender, receiver)
        with trio.fail_after(60):
            while peer not in pubsub.peers or peer not in pubsub.peer_topics.get(TOPIC, set()):
                await trio.sleep(0.05)
        stream = pubsub.peers[peer]
        # Each RPC is larger than Yamux's initial 256 KiB window, so every write waits for
        # credit mid-RPC: the moment another task's write could cut in.
        payloads = [bytes([i]) * 400_000 for i in range(1, 7)]

        async def write(i: int) -> None:
            msg = rpc_pb2.Message(data=payloads[i], topicIDs=[TOPIC],
                                  seqno=i.to_bytes(8, "big"),
                                  from_id=pubsub.my_id.to_bytes())
            await pubsub.write_msg(stream, rpc_pb2.RPC(publish=[msg]))

        async with trio.open_nursery() as nursery:
            for i in range(len(payloads)):
                nursery.start_soon(write, i)
        got: set[bytes] = set()
        with trio.move_on_after(30):
            while len(got) < len(payloads):
                got.add((await inbox.receive()).data)
        malformed = [r for r in caplog.records if "malformed RPC" in r.getMessage()]
        assert not malformed, malformed
        assert got == set(payloads)


@pytest.mark.trio
@pytest.mark.timeout(120)
async def test_gossip_to_a_live_peer_goes_on_after_its_stream_died() -> None:
    """libp2p drops a peer from pubsub when a write to its stream fails (a write cut by
    Yamux's 5-s wait for credit under overload, a reset stream) and re-opens the stream when
    the peer is still connected. 0.8.1 also forgot the peer's subscriptions, which came on the
    peer's own stream (alive, never repeated): we never sent that peer gossip again."""
    keys = [Ed25519PrivateKey.from_private_bytes(bytes([80 + i]) * 32) for i in range(2)]
    async with open_host(keys[0], P2PConfig()) as sender, \
            open_host(keys[1], P2PConfig()) as receiver:
        inbox, pubsub, peer = await _linked(sender, receiver)
        with trio.fail_after(60):
            while receiver.peer_id not in sender.mesh_peers(TOPIC):
                await trio.sleep(0.05)
        pubsub._handle_dead_peer(peer)  # as after a failed write
        with trio.fail_after(60):
            while True:
                await sender.publish(TOPIC, b"after the dead stream")
                with trio.move_on_after(1):
                    if (await inbox.receive()).data == b"after the dead stream":
                        break
        assert receiver.peer_id in sender.gossip_peers(TOPIC)
