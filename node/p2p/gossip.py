"""GossipSub topics of a :class:`node.p2p.host.P2PHost`: subscribe, publish, deliver.

Each subscriber gets its own trio channel, bounded in messages (``gossip_queue_size``) and in
bytes (``gossip_queue_bytes``); what does not fit is dropped and counted, so a slow consumer
never makes libp2p buffer without limit. In a closed group (``allowed_peers``) messages of
outsiders are refused by the topic validator, before delivery and before relaying.
"""

from __future__ import annotations

import collections
import functools
import logging
import random
from typing import TypeVar

import trio
from libp2p.abc import ISubscriptionAPI
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub

from node.clock import Clock
from node.p2p.frames import P2PError
from node.p2p.types import GossipMessage, P2PConfig, P2PStats

__all__ = ["GossipTopics", "fan_out"]

logger = logging.getLogger("node.p2p")

_T = TypeVar("_T")
_MAX_FORWARDERS = 10_000


@functools.lru_cache(maxsize=4096)  # bounded: sender ids come from the network
def peer_b58(raw: bytes) -> str:
    """The base58 text of a peer id given as bytes (libp2p builds an ``ID`` and encodes it
    again per message, ~8.6 µs; a node hears from few senders)."""
    return ID(raw).to_base58()


def fan_out(sinks: list[trio.MemorySendChannel[_T]], item: _T, stats: P2PStats,
            counter: str) -> None:
    """Hand ``item`` to every sink without waiting: a full one drops it (counted in
    ``stats.<counter>``), a closed one is forgotten."""
    for sink in list(sinks):
        try:
            sink.send_nowait(item)
        except trio.WouldBlock:
            setattr(stats, counter, getattr(stats, counter) + 1)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            sinks.remove(sink)


class GossipTopics:
    """The host's topics and their subscribers."""

    def __init__(self, *, pubsub: Pubsub, router: GossipSub, config: P2PConfig, clock: Clock,
                 peer_id: str, stats: P2PStats, nursery: trio.Nursery) -> None:
        self._pubsub = pubsub
        self.clock = clock
        self._router = router
        self.config = config
        self.peer_id = peer_id
        self.stats = stats
        self._nursery = nursery
        self._topic_sinks: dict[str, list[trio.MemorySendChannel[GossipMessage]]] = {}
        # Seeded per host: with one seed for all, every node would drop the same positions of
        # its incoming stream (and seed 0 happens to drop none of the first 25 at 20%).
        self._drop_rng = random.Random(f"{config.drop_seed}/{peer_id}")
        # Bytes held in each subscriber queue (keyed by the send channel's id).
        self._queued: dict[int, collections.deque[int]] = {}
        self._queued_bytes: dict[int, int] = {}
        # (from, seqno) -> the neighbour that forwarded it and when (the host clock's wall
        # time), noted by the topic validator as the message is read off the stream.
        self._forwarders: dict[tuple[bytes, bytes], tuple[str, float]] = {}

    async def subscribe(self, topic: str) -> trio.MemoryReceiveChannel[GossipMessage]:
        """A new channel receiving every message on ``topic`` (one channel per call).

        Messages are moved from libp2p's subscription into this channel as they arrive; if a
        consumer falls ``gossip_queue_size`` messages behind, the overflow is dropped and
        counted in ``stats.gossip_dropped_overflow``. Closed when the host stops or on
        :meth:`unsubscribe`.
        """
        send, receive = trio.open_memory_channel[GossipMessage](self.config.gossip_queue_size)
        sinks = self._topic_sinks.get(topic)
        if sinks is None:
            sinks = self._topic_sinks[topic] = []
            # Outsiders of a closed group are rejected before delivery *and* before relaying,
            # so members never spread them; the forwarder of every message is noted.
            self._pubsub.set_topic_validator(topic, self._from_member, False)
            subscription = await self._pubsub.subscribe(topic)
            self._nursery.start_soon(self._drain, topic, subscription)
        sinks.append(send)
        return receive

    async def unsubscribe(self, topic: str) -> None:
        """Leave ``topic`` and close every channel :meth:`subscribe` returned for it."""
        sinks = self._topic_sinks.pop(topic, None)
        if sinks is None:
            return
        for sink in sinks:
            sink.close()
        await self._pubsub.unsubscribe(topic)

    async def publish(self, topic: str, data: bytes) -> None:
        """Broadcast ``data`` on ``topic`` (need not be subscribed)."""
        if len(data) > self.config.gossip_max_message_bytes:
            raise P2PError(
                f"gossip message of {len(data)} bytes exceeds gossip_max_message_bytes="
                f"{self.config.gossip_max_message_bytes}"
            )
        await self._pubsub.publish(topic, bytes(data))
        self.stats.gossip_published += 1

    def gossip_peers(self, topic: str) -> list[str]:
        """Connected peers known to be subscribed to ``topic``."""
        return sorted(p.to_base58() for p in self._pubsub.peer_topics.get(topic, ()))

    def mesh_peers(self, topic: str) -> list[str]:
        """Peers in our GossipSub mesh for ``topic`` (they get full messages, not gossip)."""
        return sorted(p.to_base58() for p in self._router.mesh.get(topic, ()))

    def mesh_members(self) -> set[str]:
        """Peers in our mesh of any topic."""
        return {p.to_base58() for peers in self._router.mesh.values() for p in peers}

    def close(self) -> None:
        """Close every subscriber channel (the host is stopping)."""
        for topic_sinks in self._topic_sinks.values():
            for topic_sink in topic_sinks:
                topic_sink.close()

    def _from_member(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        if len(self._forwarders) >= _MAX_FORWARDERS:
            del self._forwarders[next(iter(self._forwarders))]
        self._forwarders[(msg.from_id, msg.seqno)] = (forwarder.to_base58(), self.clock.wall())
        allowed = self.config.allowed_peers
        if allowed is None:
            return True
        origin = peer_b58(msg.from_id)
        if origin == self.peer_id or origin in allowed:
            return True
        self.stats.gossip_refused_foreign += 1
        logger.warning("dropped gossip from %s (not in allowed_peers), via %s", origin, forwarder)
        return False

    async def _drain(self, topic: str, source: ISubscriptionAPI) -> None:
        async for msg in source:
            try:
                self._deliver(topic, msg)
            except Exception:  # one odd message must not take the host's nursery down
                logger.exception("delivering a gossip message on %s failed", topic)

    def _deliver(self, topic: str, msg: rpc_pb2.Message) -> None:
        forwarder, received_at = self._forwarders.pop((msg.from_id, msg.seqno), (None, None))
        from_peer = peer_b58(msg.from_id)
        if from_peer == self.peer_id and not self.config.deliver_own_messages:
            return
        fraction = self.config.drop_incoming_gossip_fraction
        if fraction and self._drop_rng.random() < fraction:
            self.stats.gossip_dropped_test += 1
            return
        item = GossipMessage(
            topic=topic,
            from_peer=from_peer,
            data=bytes(msg.data),
            seqno=int.from_bytes(msg.seqno, "big"),
            forwarder=forwarder,
            received_at=received_at,
        )
        self.stats.gossip_received += 1
        sinks = self._topic_sinks.get(topic, [])
        if not self._queue_room(sinks, len(item.data)):
            self.stats.gossip_dropped_overflow += 1
            return
        fan_out(sinks, item, self.stats, "gossip_dropped_overflow")

    def _queue_room(self, sinks: list[trio.MemorySendChannel[GossipMessage]], size: int) -> bool:
        """Whether every subscriber queue has room for ``size`` more bytes; if so, count them.

        The queue sizes of the items each sink holds are kept in order; whatever the consumer
        took since (the channel's buffer shrank) is popped from the front.
        """
        for sink in sinks:
            sizes = self._queued.setdefault(id(sink), collections.deque())
            held = sink.statistics().current_buffer_used
            while len(sizes) > held:
                self._queued_bytes[id(sink)] = self._queued_bytes.get(id(sink), 0) - sizes.popleft()
            if self._queued_bytes.get(id(sink), 0) + size > self.config.gossip_queue_bytes:
                return False
        for sink in sinks:
            self._queued[id(sink)].append(size)
            self._queued_bytes[id(sink)] = self._queued_bytes.get(id(sink), 0) + size
        return True
