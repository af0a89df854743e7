"""What a node does with a gossip message before SDS sees it, sans-IO.

* **Batch format.** Several SDS messages queued for one channel travel as one gossip message
  (py-libp2p's cost is per gossip message, not per byte): ``BATCH_MAGIC`` then the items, each
  behind its uvarint length. A protobuf message never starts with a zero byte (field number 0
  is invalid), so the marker cannot be mistaken for a plain SDS message, which travels as is.
  :class:`OutgoingBatch` gathers what is queued into one payload per channel, within the
  limits the receiving side enforces.
* **Budget.** Every neighbour that hands us gossip (the forwarder, authenticated by its
  connection) has a token bucket of items: one token per item plus one per started
  ``BYTES_PER_TOKEN`` bytes. A flood of validly signed events from fresh sender keys is
  throttled at the neighbour that brings it, before any signature is checked; what is dropped
  is counted. Only a peer's *own* messages (forwarder = publisher) are charged to a second
  bucket whose overflow costs it standing: an honest neighbour that relays somebody's flood is
  throttled with it, never penalised (GossipSub forwards before we validate).
* **Pace.** Our own gossip keeps within the budget a peer with our limits gives us
  (:class:`GossipPace`: ``SEND_SHARE`` of its rate and burst): a local burst of thousands of
  publishes (``publish --lines``) must not read as a flood at our neighbours, whose penalty for
  a publisher over its own budget is a ban. What waits for the pace stays queued, in order.
* **Senders.** In a closed group only members' events are accepted, whoever relays them; on a
  channel with writers (block streams: ``blocks.producers``) only the writers' content messages
  are (anyone in the group may still send sync messages, which carry acknowledgements and
  repair requests but are never logged). Both are decided from the sender field alone, before
  the signature is checked. Our own events coming back are echoes.

docs/security.md ("Gossip floods", "Batches", "Application roles") has the reasoning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from sync.errors import ErrorKind, RemoteProtocolError
from sync.peerscore import PeerBuckets, TokenBucket, penalty_of
from sync.sds import sds_pb2
from sync.varint import read_uvarint, uvarint

__all__ = [
    "BATCH_MAGIC",
    "BYTES_PER_TOKEN",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_ITEMS",
    "REASON_BUDGET",
    "REASON_NOT_MEMBER",
    "REASON_NOT_WRITER",
    "SEND_SHARE",
    "Admitted",
    "GossipGate",
    "GossipLimits",
    "GossipPace",
    "OutgoingBatch",
    "SenderCheck",
    "SenderPolicy",
    "batch_would_fill",
    "item_cost",
    "pack_batch",
    "publisher_pays",
    "unpack_batch",
]

BATCH_MAGIC = b"\x00SB1"
MAX_BATCH_ITEMS = 64
MAX_BATCH_BYTES = 128 * 1024
BYTES_PER_TOKEN = 64 * 1024
#: The share of a peer's per-publisher budget our own gossip uses: the rest absorbs arrivals
#: bunched by the network (1,000 tokens at the default burst: over a second of the default rate).
SEND_SHARE = 0.8
REASON_BATCH = "bad gossip batch"
REASON_BUDGET = "over gossip budget"
REASON_NOT_MEMBER = "sender not in allowed_peers"
REASON_NOT_WRITER = "sender not a writer of this channel"
REASON_UNREADABLE = "undecodable message"

def item_cost(item: bytes) -> int:
    """Tokens one SDS message costs a publisher's budget: one, plus one per started
    ``BYTES_PER_TOKEN`` beyond the first."""
    return 1 + len(item) // BYTES_PER_TOKEN


def publisher_pays(publisher: str, forwarder: str | None) -> bool:
    """Whether a gossip message's faults are charged to its publisher: only when the publisher
    itself handed it to us. The publisher field of a relayed message is not authenticated
    (unsigned gossip), and an honest relay forwards before it validates (GossipSub), so a relay
    is throttled by its budget but never penalised for what it carried."""
    return forwarder is not None and forwarder == publisher


def pack_batch(items: list[bytes]) -> bytes:
    """One gossip payload for ``items``: a single item as is, several as a batch. A single
    item that itself begins with the batch marker goes as a batch of one, or the receiver
    would read it as a batch (an SDS message never does: protobuf has no field 0)."""
    if len(items) == 1 and not items[0].startswith(BATCH_MAGIC):
        return items[0]
    return BATCH_MAGIC + b"".join(uvarint(len(i)) + i for i in items)


def batch_would_fill(items: int, size: int) -> bool:
    """Whether ``items`` queued messages of ``size`` bytes in all fill one gossip message."""
    return items >= MAX_BATCH_ITEMS or size >= MAX_BATCH_BYTES


class OutgoingBatch:
    """Messages queued for gossip, gathered into one payload per channel. It is *full* at
    ``MAX_BATCH_ITEMS`` messages in all or once ``MAX_BATCH_BYTES`` is reached (the last one
    may cross it: a single message is never split or refused here); a full batch takes no more,
    so a receiver's ``unpack_batch`` never refuses what we send."""

    def __init__(self) -> None:
        self._items: dict[str, list[bytes]] = {}
        self.count = 0
        self.size = 0
        self.cost = 0  # tokens at a receiver's budget (item_cost)

    @property
    def full(self) -> bool:
        return batch_would_fill(self.count, self.size)

    def add(self, channel: str, data: bytes) -> None:
        if self.full:
            raise ValueError("the batch is full: send it first")
        self._items.setdefault(channel, []).append(data)
        self.count += 1
        self.size += len(data)
        self.cost += item_cost(data)

    def payloads(self) -> list[tuple[str, bytes]]:
        """(channel, gossip payload) each, channels in the order first added."""
        return [(channel, pack_batch(items)) for channel, items in self._items.items()]


def unpack_batch(data: bytes, *, max_items: int = MAX_BATCH_ITEMS,
                 max_item_bytes: int) -> list[bytes]:
    """The SDS messages of a gossip payload; ``RemoteProtocolError`` for bad bytes."""
    if not data.startswith(BATCH_MAGIC):
        return [data]
    items: list[bytes] = []
    pos = len(BATCH_MAGIC)
    while pos < len(data):
        if len(items) >= max_items:
            raise RemoteProtocolError(f"{REASON_BATCH}: more than {max_items} items",
                                      kind=ErrorKind.BAD_BATCH)
        try:
            length, pos = read_uvarint(data, pos)
        except RemoteProtocolError as exc:
            raise RemoteProtocolError(f"{REASON_BATCH}: {exc.reason}",
                                      kind=ErrorKind.BAD_BATCH) from None
        if length == 0 or length > max_item_bytes or pos + length > len(data):
            raise RemoteProtocolError(f"{REASON_BATCH}: item empty, too large or truncated",
                                      kind=ErrorKind.BAD_BATCH)
        items.append(data[pos : pos + length])
        pos += length
    if not items:
        raise RemoteProtocolError(f"{REASON_BATCH}: no items", kind=ErrorKind.BAD_BATCH)
    return items


class SenderCheck(Enum):
    ACCEPT = "accept"
    OWN = "own"  # an echo of one of our own events


@dataclass(frozen=True)
class SenderPolicy:
    """Who may send what. ``members``: the closed group (None: open); ``writers``: channel ->
    the only senders whose content messages count on it."""

    own_id: str
    members: frozenset[str] | None = None
    writers: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def check(self, sender: str, channel: str, has_content: bool) -> SenderCheck:
        if sender == self.own_id:
            return SenderCheck.OWN
        if self.members is not None and sender not in self.members:
            raise RemoteProtocolError(REASON_NOT_MEMBER, kind=ErrorKind.NOT_MEMBER)
        allowed = self.writers.get(channel)
        if allowed is not None and has_content and sender not in allowed:
            raise RemoteProtocolError(f"{REASON_NOT_WRITER}: {channel}", kind=ErrorKind.NOT_WRITER)
        return SenderCheck.ACCEPT


@dataclass(frozen=True)
class GossipLimits:
    #: Items per second (and burst) a gossip publisher may send us.
    peer_rate: float = 1000.0
    peer_burst: float = 5000.0
    #: Publishers tracked at once (idle, i.e. full, buckets make room).
    max_peers: int = 10_000
    max_items: int = MAX_BATCH_ITEMS
    max_item_bytes: int = 1 << 20


class GossipPace:
    """The pace of our own gossip: ``SEND_SHARE`` of ``limits``' rate and burst, so that a peer
    whose :class:`GossipGate` has the same limits never finds us over our own budget."""

    def __init__(self, limits: GossipLimits, now: float, share: float = SEND_SHARE) -> None:
        self._bucket = TokenBucket(limits.peer_rate * share, max(1.0, limits.peer_burst * share),
                                   now)

    def delay(self, cost: float, now: float) -> float:
        """0.0 once ``cost`` tokens are spent on a send now; else the seconds to wait before
        asking again (nothing spent). A cost beyond the burst waits for a full bucket."""
        bucket = self._bucket
        want = min(cost, bucket.burst)
        have = bucket.available(now)
        if have >= want - 1e-3:  # (the wait computed last time, give or take float rounding)
            bucket.take(now, min(want, have))
            return 0.0
        return (want - have) / bucket.rate if bucket.rate > 0 else float("inf")


@dataclass
class Admitted:
    """What to do with one gossip message: ``items`` go to SDS; each entry of ``rejected`` is
    (error, penalty) for the publisher, to count and to score (penalty None: count only; else
    ``sync.peerscore.penalty_of(error.kind)``)."""

    items: list[bytes] = field(default_factory=list)
    rejected: list[tuple[RemoteProtocolError, str | None]] = field(default_factory=list)

    def reject(self, exc: RemoteProtocolError) -> None:
        self.rejected.append((exc, penalty_of(exc.kind)))


def _peek(item: bytes) -> tuple[str, str, bool]:
    """(sender, channel, has content) without checking anything: the cheap part of a parse."""
    msg = sds_pb2.Message()
    try:
        msg.ParseFromString(item)
    except Exception:  # the C decoder's error types vary; all mean "bad bytes"
        raise RemoteProtocolError(REASON_UNREADABLE, kind=ErrorKind.UNDECODABLE) from None
    return msg.sender_id, msg.channel_id, bool(msg.content)


def _over_budget() -> RemoteProtocolError:
    return RemoteProtocolError(REASON_BUDGET, kind=ErrorKind.OVER_BUDGET)


class GossipGate:
    """Per gossip message: unbatch, charge the publisher's budget, check each item's sender."""

    def __init__(self, policy: SenderPolicy, limits: GossipLimits | None = None) -> None:
        self.policy = policy
        self.limits = limits or GossipLimits()
        lim = self.limits
        self._buckets = PeerBuckets(lim.peer_rate, lim.peer_burst, lim.max_peers)
        self._own = PeerBuckets(lim.peer_rate, lim.peer_burst, lim.max_peers)

    def admit(self, data: bytes, forwarder: str, now: float,
              publisher: str | None = None) -> Admitted:
        """``forwarder``: the neighbour that handed us ``data``; ``publisher``: who the gossip
        message says published it (unauthenticated unless it is the forwarder)."""
        out = Admitted()
        try:
            items = unpack_batch(data, max_items=self.limits.max_items,
                                 max_item_bytes=self.limits.max_item_bytes)
        except RemoteProtocolError as exc:
            out.reject(exc)
            return out
        own = publisher is None or publisher == forwarder
        for item in items:
            cost = item_cost(item)
            if own and not self._own.take(forwarder, now, cost):
                out.rejected.append(self._own_overflow(item))
                continue
            if not self._buckets.take(forwarder, now, cost):
                out.rejected.append((_over_budget(), None))  # throttled, not its fault
                continue
            try:
                sender, channel, has_content = _peek(item)
                self.policy.check(sender, channel, has_content)
            except RemoteProtocolError as exc:
                out.reject(exc)
                continue
            # Echoes of our own events go on too: SDS notes them as seen (no repair needed).
            out.items.append(item)
        return out

    @staticmethod
    def _own_overflow(item: bytes) -> tuple[RemoteProtocolError, str | None]:
        """A publisher over its own budget pays for content (events: a flood), but its sync
        messages (acknowledgements, repair requests) are only throttled: an honest node whose
        buffers are under attack sends those in bursts, and banning it would cut its honest
        neighbours off from it."""
        try:
            _sender, _channel, has_content = _peek(item)
        except RemoteProtocolError as exc:
            return exc, penalty_of(exc.kind)
        over = _over_budget()
        return over, penalty_of(over.kind) if has_content else None

    @property
    def tracked_peers(self) -> int:
        return len(self._buckets)
