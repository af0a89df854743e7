"""``GuardedPubsub``: py-libp2p 0.8.1's ``Pubsub`` with five of its faults fixed.

1. *Reading.* 0.8.1 catches only stream and varint errors in a peer's reader: bytes that are not
   a valid ``RPC`` protobuf raise ``DecodeError`` out of the handler and take the whole network
   service (and so the node) down. Here any such error resets that one stream, drops the peer
   from pubsub and is counted (``bad_rpc_streams``).
2. *Writing* (issue 31). ``YamuxStream.write`` holds the stream's write lock per frame, not per
   call: when the send window runs out in the middle of an RPC (a busy receiver, an RPC larger
   than the window) the writer waits for credit and another writer on the same stream puts its
   frames in between. Several libp2p tasks write to a peer's pubsub stream (the per-peer send
   loop, ``flush_pending_messages``, ``send_recent_messages`` when a peer (re)subscribes or its
   stream is re-established), so under overload honest peers received RPCs made of two RPCs'
   bytes and dropped each other as "malformed" (41-82 per overloaded cluster_bench run). Here
   a whole RPC is written under a per-stream lock, and a write cut part-way (Yamux's 5-s wait
   for credit, a cancellation) resets the stream, so the receiver never parses the remains
   (``cut_writes``).
3. *A dead stream of a live peer.* 0.8.1's ``_handle_dead_peer`` forgets the peer's
   subscriptions and then re-opens our stream to it when it is still connected; but those
   subscriptions came on the peer's own stream, which is alive and will not repeat them, so
   we never sent that peer gossip again (until the connection closed): after an overload's
   write timeouts, honest nodes stopped relaying to each other. Here a still-connected
   peer's subscriptions (and its replay gate) are kept.
4. *A hello cut by a dying connection.* ``_handle_new_peer`` writes the hello on a freshly
   opened stream and 0.8.1's retry loop (``_handle_new_peer_with_retry``, a task of the pubsub
   service) catches only ``SwarmException`` and ``StreamClosed``: a reset (``StreamReset``), a
   broken socket (``StreamError('Write operation failed: TCP connection reset by remote
   peer')``, the stale connections of a node whose uplink comes back) or Yamux's window
   timeout escaped the task, which ended: the peer was never registered and never sent gossip
   again while that connection lived. ``StreamFailure`` from ``new_stream`` itself (a
   ``HostException``, not a ``SwarmException``) is caught too: 24-25 a scenario-3 run, on
   every home node, half of them Multiselect's "response timed out after 10s".
   Here any such error of the registration counts (``failed_registrations``) and is handed to
   the retry loop as ``StreamClosed``: it retries while the peer stays connected, gives up
   when it is gone.
5. *Message ids that repeat after a restart.* The message id is sender + ``seqno``, and 0.8.1
   starts the seqno counter at ``int(time.time())``, adding one per message: a node that sent
   more than one message a second before a restart (a burst) starts again below its last
   seqno and reuses ids its peers still hold in their seen cache (``gossip_seen_ttl``, 600 s),
   so they dropped its live gossip as duplicates for up to ten minutes. Here the counter starts
   at the wall clock in nanoseconds (as go-libp2p does): a restart begins far above any seqno
   the previous run could reach (it would have had to publish a billion messages a second).
   The wire format and the id function are unchanged, so stock and older peers interoperate.

6. *Queues* (set per host here, not per process). 0.8.1 builds each peer's outbound queue as
   ``RpcQueue()`` (32 RPCs, then silent drops) and each subscription channel with the module
   constant ``SUBSCRIPTION_CHANNEL_SIZE`` (32). :func:`patch_gossip_queues` makes the module's
   ``RpcQueue`` read its size from the ``GuardedPubsub`` registering the peer (its
   ``peer_queue_size``, through a context variable set for that call), and gives libp2p's own
   subscription channel room: it only feeds our drain task, which never blocks, so drops are
   counted in our bounded queues only.

7. *A list that only grows.* ``GossipSub.publish`` appends the time of every message (each
   one received or published) to ``recent_message_deliveries[topic]``, which only the
   adaptive-gossip health check prunes: with adaptive gossip off (ours), a float per message
   for the process's life (~0.8 GB a day at 300 messages/s). Here, for a router without
   adaptive gossip, those lists keep nothing (entry G1). ``equivocation_detection`` keeps
   up to 1,000 whole messages (each holding its received RPC's frame); here it keeps a
   fingerprint of each (entry G5, ``equivocation.Fingerprints``).

8. *Per-message cost.* Its reader handles each message itself, no task each (P8,
   ``receive.InlineReceive``, its base class); its validation cache is O(1) (V1) and its own
   publishes are not verified again (V2, ``validation``); its signed record goes once per
   stream (R3, ``records.drop_repeated_record`` in :meth:`GuardedPubsub.write_msg`).

9. *A subscription made while a peer's hello is written is lost.* ``_handle_new_peer``
   builds the hello from our topics, writes it (an await), and only then lists the peer in
   ``peers``; ``subscribe`` announces a topic to the peers listed. A topic subscribed during
   that write is in neither, and the peer never learns it (no mesh with it for that topic:
   1 in 4 runs of a three-host group with a faster Noise reader). Here the hello's topics
   are noted (``get_hello_packet``, through a context variable set by our
   ``_handle_new_peer``) and, once the peer is listed, what changed since is sent to it.

10. *IDONTWANT after validation* (opt-in, G6, ``idontwant``): with
   :meth:`GuardedPubsub.send_idontwant_early` each message not seen before is handed to the
   router's early IDONTWANT before it is validated.

These are entries P1-P8, G1, G5, G6, R3, V1, V2 of the table in ``node.p2p.compat`` (9 is part of
P4); they rely on 0.8.1's ``write_msg``/``stream_handler``/``_handle_new_peer``/
``_handle_dead_peer`` and its ``peer_topics`` bookkeeping, pinned by the version check of
:func:`node.p2p.compat.apply`.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import time
import weakref
from collections.abc import Callable

import libp2p.pubsub.pubsub as _pubsub_module
import trio
from libp2p.abc import INetStream
from libp2p.network.exceptions import SwarmException
from libp2p.network.stream.exceptions import StreamClosed
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import DefaultMaxMessageSize, RpcQueue

from node.p2p.compat.equivocation import Fingerprints
from node.p2p.compat.idontwant import send_idontwant_early
from node.p2p.compat.receive import InlineReceive
from node.p2p.compat.records import drop_repeated_record
from node.p2p.compat.router import quicken_router
from node.p2p.compat.validation import BoundedValidationCache, publishing
from node.p2p.compat.version import require
from node.p2p.types import P2PStats

__all__ = ["GuardedPubsub", "patch_gossip_queues"]

logger = logging.getLogger("node.p2p")

#: 0.8.1's per-peer outbound queue, for a ``Pubsub`` that is not ours.
LIBP2P_PEER_QUEUE_SIZE = 32
# libp2p's own subscription channel only feeds our drain task, which never blocks.
_LIBP2P_SUBSCRIPTION_BUFFER = 1_000_000
# The queue size of the GuardedPubsub registering a peer, for the ``RpcQueue()`` it builds.
_peer_queue_size: contextvars.ContextVar[int] = contextvars.ContextVar(
    "libp2p_peer_queue_size", default=LIBP2P_PEER_QUEUE_SIZE)
# The topics of the hello that the running ``_handle_new_peer`` wrote (fault 7).
_hello_topics: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "libp2p_hello_topics", default=None)


class _Unkept(list[float]):
    """A list ``append`` leaves empty: the delivery times no one reads (fault 7)."""

    def append(self, _item: float) -> None:
        return None


class _SizedRpcQueue(RpcQueue):
    """``RpcQueue`` whose default capacity is that of the host building it."""

    def __init__(
        self, max_size: int | None = None, max_message_size: int = DefaultMaxMessageSize
    ) -> None:
        super().__init__(max_size or _peer_queue_size.get(), max_message_size)


def patch_gossip_queues() -> None:
    # Both names are looked up in the pubsub module at call time.
    require(_pubsub_module, "RpcQueue", "SUBSCRIPTION_CHANNEL_SIZE")
    setattr(_pubsub_module, "RpcQueue", _SizedRpcQueue)  # noqa: B010
    setattr(_pubsub_module, "SUBSCRIPTION_CHANNEL_SIZE", _LIBP2P_SUBSCRIPTION_BUFFER)  # noqa: B010


class GuardedPubsub(InlineReceive):
    """``Pubsub`` whose readers survive a malformed RPC and whose writers never interleave."""

    def __init__(self, *args: object, peer_queue_size: int = LIBP2P_PEER_QUEUE_SIZE,
                 stats: P2PStats | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        #: The host's counters of gossip copies and duplicates received (None: not counted).
        self.stats = stats
        #: Outbound RPCs queued per peer before libp2p drops (``gossip_peer_queue_size``).
        self.peer_queue_size = peer_queue_size
        # This host's counts of faults 1, 2 and 4 (the module docstring).
        self.bad_rpc_streams = 0
        self.cut_writes = 0
        self.failed_registrations = 0
        # The wall clock, not the node's clock: the ids must differ from those of every earlier
        # run of this identity, which only real time orders (fault 5 above).
        self.counter = time.time_ns()
        self._write_locks: weakref.WeakKeyDictionary[INetStream, trio.Lock] = (
            weakref.WeakKeyDictionary())
        # The signed record last written on each stream (entry R3).
        self._records_sent: weakref.WeakKeyDictionary[INetStream, bytes] = (
            weakref.WeakKeyDictionary())
        if isinstance(self.router, GossipSub):
            if not self.router.adaptive_gossip_enabled:
                self.router.recent_message_deliveries = collections.defaultdict(_Unkept)
            quicken_router(self.router)  # entries G2, G3, G4
            # Fingerprints, not the messages (and the received frames they share an arena
            # with): entry G5.
            self.router.equivocation_detection = Fingerprints()  # type: ignore[assignment]
        # O(1) per message (entry V1); same ttl and bound as libp2p's.
        self.validation_cache = BoundedValidationCache(self.validation_cache.ttl,
                                                       self.validation_cache.max_size)
        # Told of each message not seen before, before it is validated (entry G6, opt-in).
        self._on_receipt: Callable[[ID, rpc_pb2.Message], None] | None = None

    def send_idontwant_early(self) -> None:
        """Entry G6 on this host's router: IDONTWANT on receipt, before validation, carried
        by the next RPC queued for each peer. For a router offering ``/meshsub/1.2.0``."""
        if not isinstance(self.router, GossipSub):
            raise TypeError("IDONTWANT needs a GossipSub router")
        stats = self.stats

        def count(ids: int, alone: bool) -> None:
            if stats is not None:
                stats.gossip_idontwant_sent += ids
                stats.gossip_idontwant_rpcs += alone

        self._on_receipt = send_idontwant_early(self.router, count).on_receipt

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        if msg_forwarder == self.my_id:  # our own publish, signed a moment ago (entry V2)
            with publishing(msg):
                await super().push_msg(msg_forwarder, msg)
            return
        # Every mesh peer sends us each message once; all but the first copy are dropped by
        # libp2p's seen cache after Noise, Yamux and the RPC decode have been paid for: the
        # count shows what the mesh degree costs (docs/p2p.md "Mesh degree").
        on_receipt = self._on_receipt
        if self.stats is not None or on_receipt is not None:
            seen = self._is_msg_seen(msg)
            if self.stats is not None:
                self.stats.gossip_copies_received += 1
                self.stats.gossip_duplicates_received += seen
            if on_receipt is not None and not seen:
                on_receipt(msg_forwarder, msg)
        await super().push_msg(msg_forwarder, msg)

    async def stream_handler(self, stream: INetStream) -> None:
        try:
            await super().stream_handler(stream)
        except Exception as exc:
            self.bad_rpc_streams += 1
            peer_id = stream.muxed_conn.peer_id
            logger.warning("dropping pubsub stream of %s after a malformed RPC: %r", peer_id, exc)
            with contextlib.suppress(Exception):
                await stream.reset()
            self._handle_dead_peer(peer_id)

    def get_hello_packet(self) -> rpc_pb2.RPC:
        hello = super().get_hello_packet()
        carried = _hello_topics.get()
        if carried is not None:  # building the hello of our _handle_new_peer: note its topics
            carried.clear()
            carried.update(self.topic_ids)
        return hello

    async def _handle_new_peer(self, peer_id: ID) -> None:
        token = _peer_queue_size.set(self.peer_queue_size)
        carried: set[str] = set()
        hello_token = _hello_topics.set(carried)
        try:
            await super()._handle_new_peer(peer_id)
            await self._announce_changes_since_hello(peer_id, carried)
        except (SwarmException, StreamClosed):
            raise  # 0.8.1's retry loop handles these
        except Exception as exc:
            self.failed_registrations += 1
            logger.info("opening the pubsub stream to %s failed: %r (cause: %r)", peer_id, exc,
                        exc.__cause__)
            raise StreamClosed(f"pubsub stream to {peer_id} broke: {exc!r}") from exc
        finally:
            _hello_topics.reset(hello_token)
            _peer_queue_size.reset(token)

    async def _announce_changes_since_hello(self, peer_id: ID, carried: set[str]) -> None:
        """Subscriptions made or dropped while the hello was written (fault 7 above)."""
        stream = self.peers.get(peer_id)
        topics = set(self.topic_ids)
        if stream is None or topics == carried:
            return
        rpc = rpc_pb2.RPC()
        for topic in sorted(topics - carried):
            rpc.subscriptions.add(subscribe=True, topicid=topic)
        for topic in sorted(carried - topics):
            rpc.subscriptions.add(subscribe=False, topicid=topic)
        await self.write_msg(stream, rpc)

    async def write_msg(self, stream: INetStream, rpc_msg: rpc_pb2.RPC) -> bool:
        lock = self._write_locks.get(stream)
        if lock is None:
            lock = self._write_locks[stream] = trio.Lock()
        async with lock:
            drop_repeated_record(self._records_sent, stream, rpc_msg)
            try:
                return await super().write_msg(stream, rpc_msg)
            except BaseException as exc:
                # Part of the RPC may be on the wire: whatever followed it on this stream would
                # be read as its remainder. Reset it (libp2p re-opens a live peer's stream).
                self.cut_writes += 1
                logger.info("resetting pubsub stream of %s after a cut write: %r",
                            stream.muxed_conn.peer_id, exc)
                with trio.CancelScope(shield=True), trio.move_on_after(2), \
                        contextlib.suppress(Exception):
                    await stream.reset()
                raise

    def _handle_dead_peer(self, peer_id: ID) -> None:
        connected = self._peer_is_connected(peer_id)
        topics = [t for t, peers in self.peer_topics.items() if peer_id in peers]
        replayed = self._replayed_recent_topics.get(peer_id)
        super()._handle_dead_peer(peer_id)
        if not connected:
            return
        for topic in topics:
            peers = self.peer_topics.setdefault(topic, set())
            if peer_id not in peers:
                peers.add(peer_id)
                self._peer_subscription_count[peer_id] = (
                    self._peer_subscription_count.get(peer_id, 0) + 1)
        if replayed:
            self._replayed_recent_topics.setdefault(peer_id, set()).update(replayed)
