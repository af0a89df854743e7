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
(``node.p2p.compat.pubsub``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.stream_muxer.exceptions import MuxedStreamError

from node.clock import SystemClock
from node.p2p import P2PConfig, P2PHost
from node.p2p.compat import GuardedPubsub
from node.p2p.run import open_host
from tests.harness.cluster import until

TOPIC = "framing-test"


async def _linked(sender: P2PHost, receiver: P2PHost) -> tuple[Any, Any, ID]:
    """Both subscribed to TOPIC and connected: the receiver's inbox, the sender's libp2p
    Pubsub and the receiver's peer id."""
    inbox = await receiver.subscribe(TOPIC)
    await sender.subscribe(TOPIC)
    await sender.connect(receiver.listen_addrs[0])
    return inbox, sender._gossip._pubsub, ID.from_base58(receiver.peer_id)


async def _published_until_received(sender: P2PHost, inbox: Any, data: bytes) -> None:
    """Publish ``data`` each second until the receiver's inbox gets it (60 s at most)."""
    with trio.fail_after(60):
        while True:
            await sender.publish(TOPIC, data)
            with trio.move_on_after(1):
                if (await inbox.receive()).data == data:
                    return


@pytest.mark.trio
@pytest.mark.timeout(120)
async def test_concurrent_rpc_writes_to_one_peer_arrive_whole(
        caplog: pytest.LogCaptureFixture) -> None:
    keys = [Ed25519PrivateKey.from_private_bytes(bytes([70 + i]) * 32) for i in range(2)]
    # Unsigned test messages (the framing, not the signing, is under test).
    config = P2PConfig(gossip_strict_signing=False)
    async with open_host(keys[0], config, clock=SystemClock()) as sender, \
            open_host(keys[1], config, clock=SystemClock()) as receiver:
        inbox, pubsub, peer = await _linked(sender, receiver)
        await until(lambda: peer in pubsub.peers and peer in pubsub.peer_topics.get(TOPIC, set()),
                    60, "the peer is not subscribed")
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
    async with open_host(keys[0], P2PConfig(), clock=SystemClock()) as sender, \
            open_host(keys[1], P2PConfig(), clock=SystemClock()) as receiver:
        inbox, pubsub, peer = await _linked(sender, receiver)
        await until(lambda: receiver.peer_id in sender.mesh_peers(TOPIC), 60, "not in the mesh")
        pubsub._handle_dead_peer(peer)  # as after a failed write
        await _published_until_received(sender, inbox, b"after the dead stream")
        assert receiver.peer_id in sender.gossip_peers(TOPIC)


async def _window_timeout(data: bytes) -> None:
    raise MuxedStreamError("Timed out waiting for window update after 5 seconds.")


@pytest.mark.trio
@pytest.mark.timeout(120)
@pytest.mark.parametrize("cut", ["reset", "window_timeout"])
async def test_a_pubsub_hello_cut_by_a_dying_connection_does_not_stop_the_host(
        monkeypatch: pytest.MonkeyPatch, cut: str) -> None:
    """A pubsub stream opened on a dying connection (the cut-off home of scenario 3 when its
    uplink comes back) fails its hello write with ``StreamReset``/``StreamError``, which 0.8.1's
    registration retry (a pubsub service task) does not catch: the task ended and the peer was
    never sent gossip. The sender's first pubsub stream here is really reset right after it
    opened (the peer's RST, made to happen), or its Yamux write fails as Yamux's 5-s wait for
    window credit does on a connection whose peer went silent; the host must retry and gossip
    must flow (both cases fail on the code before this test)."""
    keys = [Ed25519PrivateKey.from_private_bytes(bytes([90 + i]) * 32) for i in range(2)]
    async with open_host(keys[0], P2PConfig(), clock=SystemClock()) as sender, \
            open_host(keys[1], P2PConfig(), clock=SystemClock()) as receiver:
        reset: list[str] = []

        async def cut_first(stream: Any) -> None:
            if reset:
                return
            reset.append(str(stream.get_protocol()))
            if cut == "reset":
                await stream.reset()  # the hello write now raises StreamReset
            else:
                monkeypatch.setattr(stream.muxed_stream, "write", _window_timeout)

        _on_pubsub_streams(monkeypatch, sender, cut_first)
        inbox, pubsub, _ = await _linked(sender, receiver)
        assert isinstance(pubsub, GuardedPubsub)
        await _published_until_received(sender, inbox, b"after the reset hello")
        assert reset, "the pubsub stream was never opened"
        assert pubsub.failed_registrations == 1  # this host's count


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_a_subscription_made_while_the_hello_is_written_reaches_the_peer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic subscribed while the pubsub hello to a new peer is being written (0.8.1 built
    the hello before, and lists the peer for announcements only after) reaches that peer
    (0.8.1: neither carried nor announced; the peer never learnt it)."""
    keys = [Ed25519PrivateKey.from_private_bytes(bytes([95 + i]) * 32) for i in range(2)]
    async with open_host(keys[0], P2PConfig(), clock=SystemClock()) as sender, \
            open_host(keys[1], P2PConfig(), clock=SystemClock()) as receiver:
        during: list[str] = []

        async def subscribe_during_hello(stream: Any) -> None:
            real_write = stream.write

            async def write(data: bytes) -> None:
                if not during:  # the hello: subscribe while it is on its way
                    during.append("late")
                    await sender.subscribe("late")
                await real_write(data)

            monkeypatch.setattr(stream, "write", write)

        _on_pubsub_streams(monkeypatch, sender, subscribe_during_hello)
        await sender.connect(receiver.listen_addrs[0])
        await until(lambda: sender.peer_id in receiver._gossip.gossip_peers("late"), 30,
                    "the subscription sent during the hello was not seen")
        assert during == ["late"]


def _on_pubsub_streams(monkeypatch: pytest.MonkeyPatch, host: P2PHost,
                       touch: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``touch`` on each pubsub stream ``host`` opens, before libp2p writes to it."""
    libp2p_host = host._gossip._pubsub.host
    real_new_stream = libp2p_host.new_stream

    async def new_stream(peer_id: ID, protocols: list[Any]) -> Any:
        stream = await real_new_stream(peer_id, protocols)
        if any("meshsub" in str(p) for p in protocols):
            await touch(stream)
        return stream

    monkeypatch.setattr(libp2p_host, "new_stream", new_stream)
