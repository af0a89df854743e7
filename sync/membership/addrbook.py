"""The address book: which peers we could dial, learnt from signed peer records; sans-IO.

Entries come from three places: our own knowledge (``join``, bootstrap, a dial that worked:
``source=""``), and peer exchange, where a connected peer (the *source*) hands us the signed
records of others. Signature checks happen before :meth:`AddressBook.offer` (the driver
verifies each envelope and that its key is the record's peer id); this core decides what to
keep, under rules that stop one peer, or one block of addresses, from filling the book:

* ``capacity`` entries in all, ``per_bucket`` per network (``sync.membership.addrs``),
  ``per_source`` credited to one source, for the entry's whole life (dialling it, even
  successfully, keeps it on its source's account);
* a *tried* entry (we connected to that peer) is never displaced by an offer: an eclipse needs
  our honest peers to fail, not just a flood of records;
* a full bucket or book takes a new entry only by evicting an untried one credited to a
  source holding *more* entries than the offerer (fair share): a flooding source loses its own
  entries first, an honest source with a few entries keeps them;
* a record with a sequence number no newer than the one we hold changes nothing;
* an untried entry is dropped after ``max_failures`` failed dials in a row, a tried one after
  ``tried_max_failures``.

Time is the caller's (``now``, seconds); nothing here reads a clock.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace

from sync.membership.addrs import ParsedAddr, bucket_of, parse_addr

__all__ = ["OFFER_OUTCOMES", "AddressBook", "BookEntry", "BookLimits", "require_counts"]

# What :meth:`AddressBook.offer` answers: the first three keep the record, the rest refuse it.
OFFER_OUTCOMES = ("added", "updated", "unchanged", "self", "no_address", "stale",
                  "bucket_full", "source_full", "book_full", "forgotten")

_MIN_BACKOFF_S = 2.0
_MAX_BACKOFF_S = 300.0


@dataclass(frozen=True)
class BookLimits:
    capacity: int = 1000
    per_bucket: int = 32
    per_source: int = 32
    addrs_per_peer: int = 8
    max_failures: int = 5
    tried_max_failures: int = 20
    #: Peers the operator forgot (``peers forget``) whose records are refused; the oldest go.
    forgotten: int = 1024

    def __post_init__(self) -> None:
        require_counts(self, "capacity", "per_bucket", "per_source", "addrs_per_peer",
                       "max_failures", "tried_max_failures", "forgotten")


def require_counts(limits: object, *names: str) -> None:
    """Each of ``limits``' fields ``names`` is a count of at least 1."""
    for name in names:
        if getattr(limits, name) < 1:
            raise ValueError(f"{name} must be >= 1")


@dataclass
class BookEntry:
    peer_id: str
    addrs: tuple[str, ...]
    bucket: str
    seq: int
    record: bytes  # the signed envelope (b"" when we learnt the address ourselves)
    source: str  # the peer that handed us the record; "" for our own knowledge
    added: float
    tried: bool = False
    last_seen: float = 0.0
    failures: int = 0
    next_attempt: float = 0.0
    relayed: tuple[bool, ...] = field(default=())

    def dial_addrs(self) -> list[str]:
        """Addresses to dial, direct ones first, each ending in ``/p2p/<peer id>``."""
        flags = self.relayed or (False,) * len(self.addrs)
        ordered = [a for a, r in zip(self.addrs, flags, strict=True) if not r] + \
                  [a for a, r in zip(self.addrs, flags, strict=True) if r]
        return [f"{a}/p2p/{self.peer_id}" for a in ordered]


class AddressBook:
    def __init__(self, own_peer_id: str, limits: BookLimits | None = None) -> None:
        self.own_peer_id = own_peer_id
        self.limits = limits or BookLimits()
        self.entries: dict[str, BookEntry] = {}
        # Forgotten peer -> when (Unix seconds), oldest first: ``peers forget`` must outlast the
        # forgotten peer's next connection to us, whose peer exchange would teach it back.
        self.forgotten: dict[str, float] = {}
        self._per_source: Counter[str] = Counter()
        self._per_bucket: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, peer_id: object) -> bool:
        return peer_id in self.entries

    def source_count(self, source: str) -> int:
        return self._per_source[source]

    # -- learning -------------------------------------------------------------------------

    def offer(self, peer_id: str, addrs: Iterable[str], seq: int, record: bytes,
              source: str, now: float) -> str:
        """Consider a verified record of ``peer_id`` (from ``source``; "" = our own
        knowledge); returns one of :data:`OFFER_OUTCOMES`."""
        if peer_id == self.own_peer_id:
            return "self"
        if source and peer_id in self.forgotten:
            return "forgotten"
        parsed = self._usable(peer_id, addrs)
        if not parsed:
            return "no_address"
        bucket = bucket_of(parsed)
        entry = self.entries.get(peer_id)
        if entry is not None:
            return self._update(entry, parsed, bucket, seq, record)
        if source and self._per_source[source] >= self.limits.per_source:
            return "source_full"
        if self._per_bucket[bucket] >= self.limits.per_bucket and \
                not self._evict_for(source, bucket):
            return "bucket_full"
        if len(self.entries) >= self.limits.capacity and not self._evict_for(source, None):
            return "book_full"
        self._insert(BookEntry(peer_id, tuple(a.text for a in parsed), bucket, seq, record,
                               source, added=now, relayed=tuple(a.relayed for a in parsed)))
        return "added"

    def learn(self, peer_id: str, addr: str, now: float) -> str:
        """An address we know works (a dial to it succeeded, or the user joined it: then
        :meth:`remember` first)."""
        if peer_id in self.forgotten:
            return "forgotten"
        entry = self.entries.get(peer_id)
        if entry is not None and addr.removesuffix(f"/p2p/{peer_id}") in entry.addrs:
            self.connected(peer_id, now)
            return "unchanged"
        seq = entry.seq if entry is not None else 0
        # Our own knowledge outranks a record: keep the record's other addresses after it.
        others = [a for a in (entry.addrs if entry else ()) if a != addr]
        outcome = self.offer(peer_id, [addr, *others], seq + 1, entry.record if entry else b"",
                             "", now)
        if outcome in ("added", "updated"):
            self.connected(peer_id, now)
        return outcome

    def _usable(self, peer_id: str, addrs: Iterable[str]) -> list[ParsedAddr]:
        out: list[ParsedAddr] = []
        seen: set[str] = set()
        for addr in addrs:
            parsed = parse_addr(addr, peer_id)
            if parsed is not None and parsed.text not in seen:
                seen.add(parsed.text)
                out.append(parsed)
                if len(out) >= self.limits.addrs_per_peer:
                    break
        return out

    def _update(self, entry: BookEntry, parsed: list[ParsedAddr], bucket: str, seq: int,
                record: bytes) -> str:
        if seq <= entry.seq:
            return "unchanged" if seq == entry.seq else "stale"
        if bucket != entry.bucket and self._per_bucket[bucket] >= self.limits.per_bucket:
            return "bucket_full"
        self._remove(entry.peer_id)
        addrs = tuple(a.text for a in parsed)
        if addrs != entry.addrs:
            # New addresses (e.g. relayed ones once the peer holds reservations) are worth a
            # prompt dial, whatever the old ones' failures earned.
            entry = replace(entry, next_attempt=0.0, failures=0)
        # The entry stays credited to whoever brought it first, for its whole life (a dial
        # that worked, our own ``learn``, changes nothing: see ``connected``).
        self._insert(replace(entry, addrs=addrs, bucket=bucket, seq=seq,
                             record=record or entry.record,
                             relayed=tuple(a.relayed for a in parsed)))
        return "updated"

    def _evict_for(self, source: str, bucket: str | None) -> bool:
        """Make room for one entry from ``source`` (in ``bucket``, or anywhere): evict an
        untried entry whose source holds more entries than ``source`` does."""
        mine = self._per_source[source] if source else -1
        victims = [e for e in self.entries.values()
                   if not e.tried and e.source and (bucket is None or e.bucket == bucket)
                   and self._per_source[e.source] > mine + 1]
        if not victims:
            return False
        victim = max(victims, key=lambda e: (self._per_source[e.source], e.failures, -e.added))
        self._remove(victim.peer_id)
        return True

    def _insert(self, entry: BookEntry) -> None:
        self.entries[entry.peer_id] = entry
        self._per_source[entry.source] += 1
        self._per_bucket[entry.bucket] += 1

    def _remove(self, peer_id: str) -> BookEntry | None:
        entry = self.entries.pop(peer_id, None)
        if entry is not None:
            for counter, key in ((self._per_source, entry.source),
                                 (self._per_bucket, entry.bucket)):
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]
        return entry

    def forget(self, peer_id: str, now: float) -> bool:
        """``peers forget``: out of the book, and refused from peers' records and our own
        connections until :meth:`remember`. Whether it was in the book."""
        self.forgotten.pop(peer_id, None)
        self.forgotten[peer_id] = now
        while len(self.forgotten) > self.limits.forgotten:
            del self.forgotten[next(iter(self.forgotten))]
        return self._remove(peer_id) is not None

    def remember(self, peer_id: str) -> None:
        """The operator joined ``peer_id`` (again): it may be learnt like any peer."""
        self.forgotten.pop(peer_id, None)

    # -- dialling outcomes ----------------------------------------------------------------

    def connected(self, peer_id: str, now: float) -> None:
        entry = self.entries.get(peer_id)
        if entry is None:
            return
        # The entry stays credited to its source: a source whose records we dialled must not
        # gain room for more (its share would grow without bound, and tried entries are
        # never displaced).
        entry.tried, entry.failures, entry.last_seen, entry.next_attempt = True, 0, now, 0.0

    def dial_failed(self, peer_id: str, now: float) -> bool:
        """Back off ``peer_id``; returns True when the entry was dropped for good."""
        entry = self.entries.get(peer_id)
        if entry is None:
            return False
        entry.failures += 1
        limit = self.limits.tried_max_failures if entry.tried else self.limits.max_failures
        if entry.failures >= limit:
            self._remove(peer_id)
            return True
        entry.next_attempt = now + min(_MAX_BACKOFF_S,
                                       _MIN_BACKOFF_S * 2.0 ** min(entry.failures, 16))
        return False

    def retry_at(self, peer_id: str, at: float) -> None:
        """A failed dial that does not count against ``peer_id`` (our own network was down,
        :class:`~sync.membership.liveness.Liveness`): try again at ``at``."""
        entry = self.entries.get(peer_id)
        if entry is not None:
            entry.next_attempt = at

    def all_due(self) -> None:
        """Our network is back: every backed-off entry may be dialled now (its failure count
        stays, so a really dead peer is backed off again after its next failure)."""
        for entry in self.entries.values():
            entry.next_attempt = 0.0

    # -- choosing -------------------------------------------------------------------------

    def candidates(self, now: float, exclude: Collection[str], count: int,
                   rng: random.Random | None = None) -> list[BookEntry]:
        """Up to ``count`` entries to dial now: ones that never failed first, tried before
        untried, one bucket at a time (so that the peers we reach are spread over networks),
        in an order ``rng`` shuffles within each tier: nodes that all learnt the same peers
        must not all dial the same few (a herd of clusters that one loss can cut apart)."""
        rng = rng or random.Random(0)
        due = [e for e in self.entries.values()
               if e.peer_id not in exclude and e.next_attempt <= now]
        keyed = sorted(((e.failures > 0, not e.tried, rng.random(), e.peer_id), e) for e in due)
        by_bucket: dict[str, list[BookEntry]] = {}
        rank: dict[str, tuple[object, ...]] = {}
        for key, entry in keyed:
            by_bucket.setdefault(entry.bucket, []).append(entry)
            rank.setdefault(entry.bucket, key)
        out: list[BookEntry] = []
        queues = [by_bucket[b] for b in sorted(by_bucket, key=lambda b: rank[b])]
        while len(out) < count and queues:
            for queue in queues:
                if len(out) < count:
                    out.append(queue.pop(0))
            queues = [q for q in queues if q]
        return out

    def wake_at(self, now: float, exclude: Collection[str]) -> float | None:
        """When the next entry outside ``exclude`` becomes due (None: no entry waits)."""
        times = [e.next_attempt for e in self.entries.values() if e.peer_id not in exclude]
        return max(now, min(times)) if times else None

    def shareable(self, count: int, first: Collection[str] = (),
                  rng: random.Random | None = None) -> list[BookEntry]:
        """Up to ``count`` signed records to hand a peer: peers in ``first`` (connected now),
        then tried ones, in an order ``rng`` shuffles within each of those tiers (askers
        should not all learn the same few peers)."""
        rng = rng or random.Random(0)
        signed = [e for e in self.entries.values() if e.record]
        keyed = sorted(((e.peer_id not in first, not e.tried, rng.random(), e.peer_id), e)
                       for e in signed)
        return [e for _key, e in keyed[:count]]

    def restore(self, entry: BookEntry) -> bool:
        """Put back an entry saved by an earlier run (limits apply as for an offer)."""
        if entry.peer_id == self.own_peer_id or entry.peer_id in self.entries:
            return False
        if len(self.entries) >= self.limits.capacity or \
                self._per_bucket[entry.bucket] >= self.limits.per_bucket or \
                (entry.source and self._per_source[entry.source] >= self.limits.per_source):
            return False
        self._insert(replace(entry, next_attempt=0.0))
        return True
