"""Per-peer work budgets: the Recon, fetch and transfer work a peer asks of us, charged to it.

Every request a peer makes (a Recon message to answer, a fetch by id, a want list to serve)
has a cost in *work units*, charged before the work is done; one unit is about 10 µs of CPU
here. A fetch or want list is charged by the ids it names (:func:`fetch_units`,
:func:`want_units`). A Recon message is charged twice: by its size before it is read and
decoded (:func:`recon_units`), then by what it asks, once decoded and before it is answered
(:func:`recon_message_units`): a HASH range costs a range hash, a compare and perhaps a split
(12-25 µs measured), a listed key a decode and a batched lookup (~2.3 µs). Charging by the
bytes alone would have to price every byte as a range claim's (~1 µs): an honest catch-up's
key lists, 40 MB for a million events, would cost ten times their work and stall on the budget.
The cost of one request is bounded by our limits (``recon.max_message_*``, ``fetch.max_ids``).

A Recon frame's two charges go through :meth:`WorkBudget.charge_frame` (before it is read) and
:meth:`WorkBudget.settle_frame` (once decoded). The first is an advance at the price per byte
the peer's previous frames came to (at least the reading's 1 unit per KiB), or, before the peer
has one, at the dearest a byte can be (:data:`FIRST_FRAME_PRICE`); the second charges or gives
back the difference. Without the advance, a peer whose frames of made-up range claims
cost ~90 units per KiB once decoded was asked 1 unit per KiB for each retry while the node's
total budget refused it unread, so its own budget never ran out and it was never penalised.
Advanced at the reading's price, every fresh identity's first frame was read and decoded
before it could be priced (ten of them at once: ~1.5 s of decoding, 153 ms each for 1.3 MB of
made-up claims); at the dearest price, the node's total budget paces them before they are read.
An honest peer's first frame in a session is small (a split of its key space), so it pays a
few hundred units in advance and gets the overpaid part back once the frame is decoded.

Two token buckets decide when the work may run: the peer's own (``peer_rate`` units/s up to
``peer_burst``) and the node's total over all peers (``total_rate`` up to ``total_burst``), so
ten identities cannot get ten times the work of one. A bucket may go into debt: a request is
charged at once and then waits until both buckets are out of debt again (:class:`Wait`), so a
peer asking faster than its rate is *slowed* to it. A request that would have to wait longer
than ``max_wait_s`` for the peer's own bucket is *refused* (:class:`Refuse`, ``scope="peer"``)
and not charged: the peer keeps asking far beyond its rate, which costs it standing (penalty
reason ``over_budget``). When the node's total budget is what is short (many peers at once),
the request is refused with ``scope="total"`` and not penalised (an honest peer may be one of
many), but its units still count against the peer's own bucket: an identity that keeps asking
while the node is saturated soon finds itself refused for its own budget, and penalised.

The table of per-peer buckets is bounded (``max_peers``): buckets back at their burst carry no
information and are dropped first; a flood of fresh identities shares the total budget anyway.

Sans-IO: ``now`` (seconds, any monotonic origin) is passed into every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from sync.errors import LocalProtocolError
from sync.recon.wire import HASH, Limits, Message

__all__ = [
    "FIRST_FRAME_PRICE",
    "HASH_UNITS",
    "RANGES_PER_UNIT",
    "RECON_BYTES_PER_UNIT",
    "Admit",
    "Decision",
    "Refuse",
    "Wait",
    "WorkBudget",
    "WorkLimits",
    "fetch_units",
    "recon_message_units",
    "recon_units",
    "want_units",
]

#: Bytes of a Recon message per work unit of reading and decoding it: a 4 MiB key list decodes
#: in ~55 ms (0.013 µs/byte); what the ranges and keys in it cost comes on top, once decoded.
RECON_BYTES_PER_UNIT = 1024
#: Units per HASH range: a range hash, a compare and, when it differs, a split (12-25 µs).
HASH_UNITS = 2
#: Units per byte of a peer's first Recon frame, before its own frames gave it a price: the
#: dearest a byte can be. A HASH item in its smallest encoding (a kind byte, a one-byte count,
#: the fingerprint, a bound of one shared-length, one suffix-length and one suffix byte) asks
#: ``HASH_UNITS`` for ``5 + fingerprint_bytes`` bytes; the reading's 1 unit per KiB comes on top.
FIRST_FRAME_PRICE = HASH_UNITS / (5 + Limits().fingerprint_bytes) + 1 / RECON_BYTES_PER_UNIT
#: Other ranges (SKIP, KEYS, DIFF) and listed keys per unit: each a decode and a batched lookup
#: or a comparison (~2.3 µs).
RANGES_PER_UNIT = 4
#: Units per message id asked by fetch, and per key of a want list: a database lookup and the
#: event sent (reads and sends run in worker threads and the network, hence cheap here).
UNITS_PER_ID = 2


def recon_units(nbytes: int) -> int:
    """The cost of reading and decoding one Recon message of ``nbytes`` bytes."""
    return 1 + max(nbytes, 0) // RECON_BYTES_PER_UNIT


def recon_message_units(message: Message) -> int:
    """The cost of answering one decoded Recon message: its HASH ranges, its other ranges and
    the keys it lists (bounded by ``recon.max_message_ranges`` and ``max_message_keys``)."""
    hashes = sum(1 for item in message.items if item.kind == HASH)
    keys = sum(len(item.keys) for item in message.items)
    return 1 + HASH_UNITS * hashes + (max(message.ranges - hashes, 0) + keys) // RANGES_PER_UNIT


def fetch_units(ids: int) -> int:
    """The cost of one fetch-by-id request naming ``ids`` message ids."""
    return 1 + UNITS_PER_ID * max(ids, 0)


def want_units(keys: int) -> int:
    """The cost of serving one want list of ``keys`` keys."""
    return 1 + UNITS_PER_ID * max(keys, 0)


@dataclass(frozen=True)
class WorkLimits:
    """Rates in units per second, bursts in units (``peers.work_*`` in the node's config)."""

    peer_rate: float = 10_000.0
    peer_burst: float = 200_000.0
    total_rate: float = 30_000.0
    total_burst: float = 400_000.0
    max_wait_s: float = 10.0
    max_peers: int = 10_000

    def __post_init__(self) -> None:
        if min(self.peer_rate, self.total_rate) <= 0 or self.max_wait_s <= 0:
            raise LocalProtocolError("work rates and max_wait_s must be > 0")
        if self.peer_burst < 1 or self.total_burst < self.peer_burst:
            raise LocalProtocolError("need 1 <= peer_burst <= total_burst")
        if self.max_peers < 1:
            raise LocalProtocolError("max_peers must be >= 1")

    @property
    def max_units(self) -> float:
        """The most one request may cost and still be granted by an idle node."""
        return self.peer_burst + self.peer_rate * self.max_wait_s


@dataclass(frozen=True)
class Admit:
    """Do the work now."""

    units: int


@dataclass(frozen=True)
class Wait:
    """Charged; do the work at ``until`` (the peer, or all peers together, asked too fast)."""

    units: int
    until: float


@dataclass(frozen=True)
class Refuse:
    """Not charged, not done: ``scope`` is ``"peer"`` (this peer is far over its budget) or
    ``"total"`` (the node's budget for all peers is spent for longer than ``max_wait_s``)."""

    units: int
    scope: str
    wait_s: float

    @property
    def penalty(self) -> str | None:
        """What the refusal costs the peer: far over its own budget, ``over_budget``; refused
        because the node as a whole is saturated, nothing (it may be an honest peer)."""
        return "over_budget" if self.scope == "peer" else None


Decision = Admit | Wait | Refuse


class _Bucket:
    """Tokens refill at ``rate`` up to ``burst``; may be spent below zero (debt). ``price``:
    what the peer's Recon frames cost per byte (the advance on its next one; none before its
    first frame is settled)."""

    __slots__ = ("at", "burst", "price", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, now
        self.price: float | None = None

    def level(self, now: float) -> float:
        if now > self.at:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now
        return self.tokens

    def wait_after(self, units: float, now: float) -> float:
        """Seconds until the bucket is out of debt if ``units`` were spent now."""
        left = self.level(now) - units
        return 0.0 if left >= 0 else -left / self.rate


class WorkBudget:
    """``charge(peer, units, now)`` says whether, and when, a peer's request may be worked on."""

    def __init__(self, limits: WorkLimits | None = None, now: float = 0.0) -> None:
        self.limits = limits or WorkLimits()
        self._total = _Bucket(self.limits.total_rate, self.limits.total_burst, now)
        self._peers: dict[str, _Bucket] = {}
        #: Units granted (admitted or waiting), requests slowed, refused per scope.
        self.granted_units = 0
        self.waits = 0
        self.refused = {"peer": 0, "total": 0}

    def __len__(self) -> int:
        return len(self._peers)

    def charge(self, peer: str, units: int, now: float, spent: bool = False) -> Decision:
        """``spent``: part of the work is already done (a Recon message decoded before its
        content could be priced): the units are taken from both buckets even when the rest
        is refused, so that no refusal leaves done work unpaid."""
        limits = self.limits
        units = max(int(units), 1)
        bucket = self._bucket(peer, now)
        peer_wait = bucket.wait_after(units, now)
        total_wait = self._total.wait_after(units, now)
        if peer_wait > limits.max_wait_s or units > limits.max_units:
            if spent:
                bucket.tokens -= units
                self._total.tokens -= units
            self.refused["peer"] += 1
            return Refuse(units, "peer", peer_wait)
        if total_wait > limits.max_wait_s:
            # What a peer asks for counts against its own budget even when the node as a whole
            # has no room for it: an identity that keeps asking while we are saturated (one of
            # many) ends up over its own budget, and pays for that.
            bucket.tokens -= units
            if spent:
                self._total.tokens -= units
            self.refused["total"] += 1
            return Refuse(units, "total", total_wait)
        bucket.tokens -= units
        self._total.tokens -= units
        self.granted_units += units
        wait = max(peer_wait, total_wait)
        if wait <= 0:
            return Admit(units)
        self.waits += 1
        return Wait(units, now + wait)

    def charge_frame(self, peer: str, nbytes: int, now: float) -> Decision:
        """A Recon frame of ``nbytes``, before it is read: its reading (:func:`recon_units`)
        or, when more, its size at the price per byte of the peer's previous frames (before
        it has one: :data:`FIRST_FRAME_PRICE`), up to the most one request may cost (so a
        peer with a full bucket is never refused)."""
        price = self._bucket(peer, now).price
        per_byte = FIRST_FRAME_PRICE if price is None else price
        units = max(recon_units(nbytes), ceil(per_byte * max(nbytes, 0)))
        return self.charge(peer, min(units, int(self.limits.max_units)), now)

    def settle_frame(self, peer: str, nbytes: int, units: int, paid: int,
                     now: float) -> Decision:
        """The same frame once decoded, asking ``units`` of work (:func:`recon_message_units`)
        after ``paid`` in advance: what is still owed for reading and answering it is charged
        as ``spent`` (the decoding is done), an overpaid advance is given back. The peer's
        price becomes this frame's, or half its former one when that is more, so that cheap
        frames between dear ones do not reset it."""
        bucket = self._bucket(peer, now)
        due = recon_units(nbytes) + max(int(units), 0)
        bucket.price = max(due / max(nbytes, 1), (bucket.price or 0.0) / 2)
        if due > paid:
            return self.charge(peer, due - paid, now, spent=True)
        refund = paid - due
        bucket.tokens = min(bucket.burst, bucket.level(now) + refund)
        self._total.tokens = min(self._total.burst, self._total.level(now) + refund)
        self.granted_units -= refund
        return Admit(0)

    def available(self, peer: str, now: float) -> float:
        """The peer's tokens now (negative: in debt)."""
        bucket = self._peers.get(peer)
        return self.limits.peer_burst if bucket is None else bucket.level(now)

    def _bucket(self, peer: str, now: float) -> _Bucket:
        bucket = self._peers.get(peer)
        if bucket is not None:
            return bucket
        if len(self._peers) >= self.limits.max_peers:
            self._make_room(now)
        bucket = self._peers[peer] = _Bucket(self.limits.peer_rate, self.limits.peer_burst, now)
        return bucket

    def _make_room(self, now: float) -> None:
        burst = self.limits.peer_burst
        self._peers = {p: b for p, b in self._peers.items() if b.level(now) < burst}
        if len(self._peers) >= self.limits.max_peers:
            # Everyone is spending: forget the peer with the most tokens left (the least in
            # debt), so that dropping an entry never forgives a debtor first.
            richest = max(self._peers, key=lambda p: self._peers[p].level(now))
            del self._peers[richest]
