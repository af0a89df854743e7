"""GossipSub 1.2's IDONTWANT sent on receipt, before validation (entry G6 of the table in
``node.p2p.compat``); opt-in, per router (``P2PConfig.gossip_idontwant``).

0.8.1 sends IDONTWANT from ``GossipSub.publish``, i.e. after the message was validated, in a
control RPC of its own to every v1.2+ mesh peer, the peer that sent it included; its
``split_rpc`` would also cut a control part off any RPC carrying messages into an RPC of its
own. By then the mesh peers have mostly sent their copies: the IDONTWANT arrives with the
copies it should have stopped, and every message costs one more RPC per mesh peer.

Here, as go-libp2p does: when a message not seen before arrives (before its signature and
topic validators run) and its data is at least :data:`THRESHOLD_BYTES`, its id goes to every
mesh peer of its topics that speaks v1.2+, except the peer that sent it, its origin and a peer
that already told us it does not want it. The id rides on an RPC already queued for that peer
and not yet written (the next one the writer takes); only when none is queued does it go in an
RPC of its own, onto which the messages forwarded to that peer meanwhile are merged while it
is still the newest RPC in the queue. 0.8.1's after-validation emission is turned off for
the router.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import RpcQueue

from node.p2p.compat.router import V12_PLUS
from node.p2p.compat.version import require

__all__ = ["THRESHOLD_BYTES", "EarlyIdontwant", "send_idontwant_early"]

#: Smallest message data for which an IDONTWANT is sent (go-libp2p's default threshold): for a
#: smaller message the id costs about as much as the copy it would save.
THRESHOLD_BYTES = 1024
#: IDONTWANT ids a peer may leave with us per heartbeat (0.8.1 keeps 10 and then drops ids at
#: random, set order; go-libp2p keeps 1,000): set on a router that sends them early.
HONOURED_PER_HEARTBEAT = 1000
# Room left in an RPC for the ids added to it: a field tag, a length and the ids themselves.
_ID_OVERHEAD_BYTES = 8


def _queued(queue: RpcQueue) -> Any:
    """The deques of a peer's queue: (priority, normal); the writer pops priority first."""
    inner = queue._queue
    return inner._priority, inner._non_priority


def _only_messages(rpc: rpc_pb2.RPC) -> bool:
    return not rpc.subscriptions and not rpc.HasField("control")


class EarlyIdontwant:
    """G6 on one router: the receipt hook and the ``send_rpc`` that merges into our RPC."""

    def __init__(self, router: GossipSub, count: Callable[[int, bool], None]) -> None:
        require(router, "send_rpc", "mesh", "peer_protocol", "dont_send_message_ids",
                "_pending_control", "max_idontwant_messages", "_emit_idontwant_for_message",
                "pubsub")
        self._router = router
        self._count = count
        self._send = router.send_rpc
        # Per peer queue: the RPC we queued to carry IDONTWANT alone, which later messages to
        # that peer join while it is the newest RPC in the queue. Keyed weakly by the queue
        # object: a departed peer's queue (and our entry) goes with it.
        self._own: weakref.WeakKeyDictionary[RpcQueue, rpc_pb2.RPC] = (
            weakref.WeakKeyDictionary())

    def install(self) -> None:
        router = self._router

        async def after_validation(_msg_id: bytes, _topic_ids: Any) -> None:
            return None  # sent on receipt instead (on_receipt)

        router._emit_idontwant_for_message = after_validation  # type: ignore[method-assign,assignment]
        router.send_rpc = self.send_rpc  # type: ignore[method-assign]
        router.max_idontwant_messages = max(router.max_idontwant_messages,
                                            HONOURED_PER_HEARTBEAT)

    def on_receipt(self, forwarder: ID, msg: rpc_pb2.Message) -> None:
        """A message not seen before arrived from ``forwarder``: tell the other mesh peers."""
        if len(msg.data) < THRESHOLD_BYTES:
            return
        router = self._router
        pubsub: Any = router.pubsub
        if pubsub is None:
            return
        peers: set[ID] = set()
        for topic in msg.topicIDs:
            peers.update(router.mesh.get(topic, ()))
        if not peers:
            return
        peers.discard(forwarder)
        peers.discard(ID(msg.from_id))
        msg_id: bytes = pubsub.get_message_id(msg)
        for peer in peers:
            if router.peer_protocol.get(peer) not in V12_PLUS:
                continue
            if msg_id in router.dont_send_message_ids.get(peer, ()):
                continue  # it has the message: it told us so
            queue = pubsub.peer_queues.get(peer)
            if queue is not None:
                self._add(queue, msg_id)

    def _add(self, queue: RpcQueue, msg_id: bytes) -> None:
        priority, normal = _queued(queue)
        waiting = priority[0] if priority else normal[0] if normal else None
        if waiting is not None and (waiting.ByteSize() + len(msg_id) + _ID_OVERHEAD_BYTES
                                    <= queue.max_message_size):
            _carry(waiting, msg_id)
            self._count(1, False)
            return
        alone = rpc_pb2.RPC()
        _carry(alone, msg_id)
        if queue.push(alone):
            self._own[queue] = alone
            self._count(1, True)

    def send_rpc(self, peer_id: ID, rpc: rpc_pb2.RPC, priority: bool = False) -> None:
        """Messages for a peer whose newest queued RPC is our IDONTWANT join that RPC; anything
        else takes the router's ``send_rpc`` (G3, then 0.8.1's)."""
        pubsub: Any = self._router.pubsub
        queue = None if pubsub is None else pubsub.peer_queues.get(peer_id)
        own = None if queue is None else self._own.get(queue)
        if queue is None or own is None:
            self._send(peer_id, rpc, priority)
            return
        _, normal = _queued(queue)
        if not normal or normal[-1] is not own:  # written, or no longer the newest
            del self._own[queue]
            self._send(peer_id, rpc, priority)
            return
        if (not _only_messages(rpc) or peer_id in self._router._pending_control
                or own.ByteSize() + rpc.ByteSize() > queue.max_message_size):
            self._send(peer_id, rpc, priority)
            return
        own.publish.extend(rpc.publish)
        if rpc.senderRecord and not own.senderRecord:
            own.senderRecord = rpc.senderRecord


def _carry(rpc: rpc_pb2.RPC, msg_id: bytes) -> None:
    """Add ``msg_id`` to the RPC's IDONTWANT (one entry per RPC)."""
    entries = rpc.control.idontwant
    (entries[0] if entries else entries.add()).messageIDs.append(msg_id)


def send_idontwant_early(router: GossipSub, count: Callable[[int, bool], None]) -> EarlyIdontwant:
    """G6 on ``router``; ``count(ids, alone)`` is told of every id queued (``alone``: in an RPC
    started for it). The caller hands each received message to ``on_receipt``."""
    early = EarlyIdontwant(router, count)
    early.install()
    return early
