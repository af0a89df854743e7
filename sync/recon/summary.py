"""``SummaryKeyStore``: a Recon :class:`~sync.recon.store.KeyStore` with memory bounded by config.

The keys live in a :class:`KeySource` (the events table in the node); in memory there is only a
:class:`~sync.recon.buckets.BucketSummary` (count and hash sum per bucket of ``load`` to
``2 * load`` keys, at most ``max_buckets`` buckets) and a least-recently-used cache of the keys of
a few buckets (at most ``cache_keys`` keys). The hash of the keys below a bound is the sum of the
whole buckets before it (a Fenwick walk) plus the keys of its own bucket below it, so a range
hash costs two bucket reads at most (none when cached), whatever the length of the range.
Inserts keep cached buckets current (and a split caches both halves), so a bucket that is split
again and again as the log grows is read from the source once.

The source may hold keys the summary has not accounted yet (a database commit is visible before
the store hears of it): a bucket read that does not match the summary is used once and not
cached, and a split waits until it matches. Such a read can make one range hash differ from the
peer's for a moment, which costs Recon one more round, never a wrong result: the keys themselves
are always compared through the source.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import accumulate, pairwise
from typing import Protocol

from sync.errors import LocalProtocolError
from sync.recon.buckets import BucketSummary
from sync.recon.reads import KeyReads, KeysRead, RangeRead
from sync.recon.sha256a import Sha256a, digest_of_wide, wide_of
from sync.recon.store import EMPTY_HASH

__all__ = ["KeySource", "SummaryKeyStore"]

# Added to every difference of two prefix sums: a multiple of 2^32 in each 64-bit lane slot, so
# a transiently inconsistent bucket read (see the module docstring) can never borrow across
# slots or go negative; the lanes, taken mod 2^32, are unchanged.
_BIAS = sum(1 << (62 + 64 * i) for i in range(8))


class KeySource(Protocol):
    """Where the keys are: ascending range reads and membership, both answered exactly."""

    def add(self, key: bytes) -> bool:
        """Make ``key`` part of the source; True when it was not there before."""
        ...

    def present(self, keys: Sequence[bytes]) -> set[bytes]:
        """Those of ``keys`` the source holds."""
        ...

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]:
        """Up to ``limit`` keys of ``[lo, hi)`` (``hi`` None: to the end), ascending."""
        ...


class SummaryKeyStore:
    """Implements ``sync.recon.KeyStore`` (and ``range_fingerprints``) over a key source."""

    def __init__(
        self,
        source: KeySource,
        summary: BucketSummary | None = None,
        *,
        load: int = 256,
        max_buckets: int = 32768,
        cache_keys: int = 16_384,
    ) -> None:
        if cache_keys < 0:
            raise LocalProtocolError("cache_keys must be >= 0")
        self.source = source
        self.summary = summary or BucketSummary(load=load, max_buckets=max_buckets)
        self.cache_keys = cache_keys
        # bucket start -> (its keys, running wide sums); only reads that matched the summary.
        self._cache: OrderedDict[bytes, tuple[list[bytes], tuple[list[int], list[int]]]] = (
            OrderedDict())
        self._cached = 0
        # bucket start -> count the bucket must reach before a failed split is tried again.
        self._split_retry: dict[bytes, int] = {}
        #: Bucket reads from the source, and those that did not match the summary.
        self.reads = 0
        self.mismatched_reads = 0
        #: Asking mode (sync/recon/reads.py): queries never call the source; the reads they
        #: lack are recorded for :meth:`wanted` and answered through :meth:`answer`.
        self.asks = False
        self._answers: dict[RangeRead, list[bytes]] = {}
        self._held: dict[bytes, bool] = {}
        self._want_ranges: dict[RangeRead, None] = {}
        self._want_present: dict[bytes, None] = {}
        #: Keys held in the answers of the step being run (its driver bounds them).
        self.answered_keys = 0
        self._direct = False  # inserts read the source themselves (the driver's own work)

    def __len__(self) -> int:
        return self.summary.total

    # -- updates ------------------------------------------------------------------------------

    def insert(self, key: bytes) -> bool:
        return self.insert_many([key]) == 1

    def insert_many(self, keys: Iterable[bytes]) -> int:
        """Add ``keys``; the number that were new. Splits wait until all are accounted."""
        # Inserts come from the driver, between steps: their splits read the source directly,
        # and answers given before them may lack the new keys.
        self.forget_answers()
        self._direct = True
        try:
            return self._insert_many(keys)
        finally:
            self._direct = False

    def _insert_many(self, keys: Iterable[bytes]) -> int:
        summary = self.summary
        touched: set[int] = set()
        added = 0
        for key in keys:
            if not self.source.add(key):
                continue
            bucket = summary.bucket_of(key)
            summary.add(bucket, wide_of(key))
            self._cache_insert(summary.starts[bucket], key)
            touched.add(bucket)
            added += 1
        # By start key, not index: a split shifts the indices after it, a merge halves them.
        todo = [summary.starts[b] for b in touched]
        while todo:
            bucket = summary.bucket_of(todo.pop())
            if summary.oversized(bucket):
                todo += self._split(bucket)
        return added

    def _split(self, bucket: int) -> list[bytes]:
        """Split ``bucket``; the start keys of its two halves (none when it must wait)."""
        summary = self.summary
        start = summary.starts[bucket]
        if summary.counts[bucket] < self._split_retry.get(start, 0):
            return []
        keys, sums, exact = self._read(bucket)
        before = len(summary)
        # Only the left half's sum is needed (the right's is the bucket's less it), hashed from
        # the nearer end of what the read has computed already: an exact read holds exactly
        # the accounted keys (see _read), so the bucket's sum is the total of its keys.
        if not exact or not summary.split(
            bucket, keys, self._partial(keys, sums, len(keys) // 2, summary.wides[bucket])
        ):
            self._split_retry[start] = summary.counts[bucket] + max(1, summary.load // 8)
            return []
        self._split_retry.pop(start, None)
        half = len(keys) // 2
        # Pairs were merged (2 buckets -> 3 -> 2 as well): every cached bucket changed.
        if len(summary) <= before:
            self._cache.clear()
            self._cached = 0
            self._split_retry.clear()
        elif self._drop(start):
            # A cached bucket stays cached as its two halves, with the running sums each keeps
            # (front sums of the left half, back sums of the right one).
            front, back = sums
            self._put(start, keys[:half], (front[: half + 1], [0]))
            self._put(keys[half], keys[half:], ([0], back[: len(keys) - half + 1]))
        return [start, keys[half]]

    # -- source reads, or requests for them ----------------------------------------------------

    def _source_keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes] | None:
        """``source.keys``, or in asking mode its answer (None: not answered yet, recorded)."""
        if not self.asks or self._direct:
            return self.source.keys(lo, hi, limit)
        got = self._answers.get((lo, hi, limit))
        if got is None:
            self._want_ranges[lo, hi, limit] = None
        return got

    def _source_present(self, keys: Sequence[bytes]) -> set[bytes]:
        if not self.asks:
            return self.source.present(keys)
        out: set[bytes] = set()
        for key in keys:
            held = self._held.get(key)
            if held is None:
                self._want_present[key] = None
            elif held:
                out.add(key)
        return out

    def wanted(self) -> KeyReads | None:
        """After a step in asking mode: the reads it lacked (the step must be run again once
        they are answered), or None when it had every answer (they are spent then)."""
        if not (self._want_ranges or self._want_present):
            self.forget_answers()
            return None
        reads = KeyReads(tuple(self._want_ranges), tuple(self._want_present))
        self._want_ranges.clear()
        self._want_present.clear()
        return reads

    def answer(self, answer: KeysRead) -> None:
        """The driver's answers to the reads a step asked for (``ReadKeys``)."""
        reads = answer.reads
        self._answers.update(zip(reads.ranges, answer.keys, strict=True))
        self.reads += len(reads.ranges)
        self.answered_keys += sum(map(len, answer.keys))
        for key in reads.present:
            self._held[key] = key in answer.held

    def forget_answers(self) -> None:
        """Drop the answers given (spent, or stale after an insert) and what was asked."""
        self._answers.clear()
        self._held.clear()
        self._want_ranges.clear()
        self._want_present.clear()
        self.answered_keys = 0

    # -- bucket reads -------------------------------------------------------------------------

    def _drop(self, start: bytes) -> bool:
        """Forget the cached keys of the bucket at ``start``; whether there were any."""
        entry = self._cache.pop(start, None)
        if entry is None:
            return False
        self._cached -= len(entry[0])
        return True

    def _put(self, start: bytes, keys: list[bytes], sums: tuple[list[int], list[int]]) -> None:
        """Cache an exact read (see :meth:`_read`), evicting the least recently used."""
        if len(keys) > self.cache_keys:
            return
        self._cache[start] = (keys, sums)
        self._cached += len(keys)
        self._evict()

    def _evict(self) -> None:
        while self._cached > self.cache_keys:
            _, (old, _) = self._cache.popitem(last=False)
            self._cached -= len(old)

    def _cache_insert(self, start: bytes, key: bytes) -> None:
        """Keep the cached keys of the bucket at ``start`` current with a key just accounted.

        A cached read holds exactly the accounted keys, so the new key is not in it; the
        running sums stay valid up to where it goes in (front) and after it (back).
        """
        entry = self._cache.get(start)
        if entry is None:
            return
        keys, (front, back) = entry
        at = bisect_left(keys, key)
        del front[at + 1 :]
        del back[len(keys) - at + 1 :]
        keys.insert(at, key)
        self._cached += 1
        self._evict()

    def _read(self, bucket: int) -> tuple[list[bytes], tuple[list[int], list[int]], bool]:
        """The keys of ``bucket`` (from the cache or the source), their running wide sums as far
        as computed yet (see :meth:`_partial`), and whether the read matches the summary (only
        those are cached)."""
        summary = self.summary
        start = summary.starts[bucket]
        entry = self._cache.get(start)
        if entry is not None:
            self._cache.move_to_end(start)
            return entry[0], entry[1], True
        count = summary.counts[bucket]
        sums: tuple[list[int], list[int]] = ([0], [0])
        keys: list[bytes] = []
        if count:
            got = self._source_keys(start, summary.end_of(bucket), count + summary.load)
            if got is None:  # asked for: this run of the step is undone
                return [], sums, False
            keys = got
        if not self.asks or self._direct:  # asked reads are counted once, when answered
            self.reads += 1
        # The source only ever gains keys and holds every accounted one, so a read matching
        # the count holds exactly the accounted ones (all a split relies on).
        if len(keys) != count:
            self.mismatched_reads += 1
            return keys, sums, False
        self._put(start, keys, sums)
        return keys, sums, True

    @staticmethod
    def _partial(keys: list[bytes], sums: tuple[list[int], list[int]], off: int,
                 total: int | None) -> int:
        """Wide sum of ``keys[:off]``, hashing as few keys as it can.

        ``sums`` are running sums from the front (``front[i]``: ``keys[:i]``) and from the back
        (``back[j]``: the last ``j`` keys), each as far as computed yet: most reads serve a bound
        or two, so hashes are computed lazily, from the nearer end when the bucket's total is
        known (a read matching the summary).
        """
        front, back = sums
        need = len(keys) - off
        if off < len(front):
            return front[off]
        if total is not None and need < len(back):
            return total - back[need]
        if total is not None and need - len(back) < off - len(front):
            done = len(back) - 1
            back += accumulate(map(wide_of, reversed(keys[off : len(keys) - done])),
                               initial=back[-1])
            del back[done + 1]  # accumulate repeats its initial value
            return total - back[need]
        done = len(front) - 1
        front += accumulate(map(wide_of, keys[done:off]), initial=front[-1])
        del front[done + 1]
        return front[off]

    def _below(self, key: bytes) -> tuple[int, int]:
        """(wide sum, count) of the keys below ``key``."""
        summary = self.summary
        bucket = summary.bucket_of(key)
        wide, count = summary.before(bucket)
        if key == summary.starts[bucket] or not summary.counts[bucket]:
            return wide, count
        keys, sums, exact = self._read(bucket)
        off = bisect_left(keys, key)
        total = summary.wides[bucket] if exact else None
        return wide + self._partial(keys, sums, off, total), count + off

    # -- queries ------------------------------------------------------------------------------

    def contains(self, key: bytes) -> bool:
        return bool(self._source_present([key]))

    def contains_many(self, keys: Sequence[bytes]) -> set[bytes]:
        """Those of ``keys`` in the store, in one pass over the source."""
        return self._source_present(keys)

    def range_fingerprints(self, bounds: list[bytes]) -> list[tuple[int, bytes]]:
        """(count, 32-byte digest) of the adjacent ranges ``[bounds[i], bounds[i+1])``."""
        below = [self._below(bound) for bound in bounds]
        out: list[tuple[int, bytes]] = []
        for (w1, c1), (w2, c2) in pairwise(below):
            out.append((c2 - c1, digest_of_wide(w2 - w1 + _BIAS)) if c2 > c1 else (0, bytes(32)))
        return out

    def range_hash(self, lo: bytes, hi: bytes) -> Sha256a:
        if not lo < hi:
            return EMPTY_HASH
        (w1, c1), (w2, c2) = self._below(lo), self._below(hi)
        return Sha256a.from_wide(w2 - w1 + _BIAS, c2 - c1) if c2 > c1 else EMPTY_HASH

    def count(self, lo: bytes, hi: bytes) -> int:
        if not lo < hi:
            return 0
        return max(0, self._below(hi)[1] - self._below(lo)[1])

    def keys(self, lo: bytes, hi: bytes, limit: int) -> list[bytes]:
        """Walks the buckets through the cache: a session asks next for hashes in them."""
        out: list[bytes] = []
        if not lo < hi or limit <= 0:
            return out
        summary = self.summary
        bucket = summary.bucket_of(lo)
        while len(out) < limit:
            keys = self._read(bucket)[0] if summary.counts[bucket] else []
            i = bisect_left(keys, lo) if not out else 0
            j = bisect_left(keys, hi, i)
            out += keys[i : min(j, i + limit - len(out))]
            end = summary.end_of(bucket)
            if j < len(keys) or end is None or end >= hi:
                break
            bucket += 1
        return out

    def key_at(self, lo: bytes, hi: bytes, rank: int) -> bytes:
        if rank < 0:
            raise LocalProtocolError("key_at rank out of range")
        mismatched, asked = self.mismatched_reads, len(self._want_ranges)
        target = self._below(lo)[1] + rank
        if target < self.summary.total:
            bucket, within = self.summary.find(target)
            keys = self._read(bucket)[0]
            if within < len(keys) and lo <= keys[within] < hi:
                return keys[within]
        if self.mismatched_reads == mismatched and len(self._want_ranges) == asked:
            raise LocalProtocolError("key_at rank out of range")
        # A read did not match the summary (keys not accounted yet): ask the source. Far ranks
        # get the range's first key, which serves a split as well, only less evenly; answers
        # are exact again once those keys are accounted.
        near = self._source_keys(lo, hi, rank + 1 if rank <= 2 * self.summary.load else 1)
        if near is None:  # asked for: any answer will do, this run is undone
            return lo
        if not near or (len(near) <= rank and rank <= 2 * self.summary.load):
            raise LocalProtocolError("key_at rank out of range")
        return near[-1]
