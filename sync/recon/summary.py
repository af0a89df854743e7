"""``SummaryKeyStore``: a Recon :class:`~sync.recon.store.KeyStore` with memory bounded by config.

The keys live outside it (the events table in the node); in memory there is only a
:class:`~sync.recon.buckets.BucketSummary` (count and hash sum per bucket of ``load`` to
``2 * load`` keys, at most ``max_buckets`` buckets) and a least-recently-used cache of the keys of
a few buckets (at most ``cache_keys`` keys). The hash of the keys below a bound is the sum of the
whole buckets before it (a Fenwick walk) plus the keys of its own bucket below it, so a range
hash costs two bucket reads at most (none when cached), whatever the length of the range.
Inserts keep cached buckets current (and a split caches both halves), so a bucket that is split
again and again as the log grows is read once.

The store never reads the keys itself: a read it lacks is recorded and asked for (``wanted``,
a :class:`~sync.recon.reads.KeyReads`), its driver makes it and hands the result back
(``answer``); sync/recon/reads.py. That holds for a session's queries (each made again once
answered: :attr:`misses` tells it one lacked) and for the bucket splits after an insert
(``split_pending``, called again after each answer).
Keys enter through :meth:`SummaryKeyStore.insert_many`: the driver's word that the log now
holds them (after a commit), never a read.

The log may hold keys the summary has not accounted yet (a database commit is visible before
the store hears of it): a bucket read that does not match the summary is used for the step
that asked for it and not cached (its running sums serve that step's every bound in the
bucket), and a split waits until it matches. Such a read can make one range hash differ from the
peer's for a moment, which costs Recon one more round, never a wrong result: the keys themselves
are always compared through the log.

The answers of one step are bounded (``answer_keys``): past the bound the answers held are
dropped before new ones are taken, and what the step computed from them is kept (the hash sum
below each bound, key lists and ranks), so a step over the bound (a hostile message naming
ranges all over a large log) still settles, holding at most the bound plus those results.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import accumulate, pairwise

from sync.errors import LocalProtocolError
from sync.recon.buckets import BucketSummary
from sync.recon.reads import KeyReads, KeysRead, RangeRead
from sync.recon.sha256a import Sha256a, digest_of_wide, wide_of
from sync.recon.store import EMPTY_HASH

__all__ = ["MIN_ANSWER_KEYS", "SummaryKeyStore"]

# Added to every difference of two prefix sums: a multiple of 2^32 in each 64-bit lane slot, so
# a transiently inconsistent bucket read (see the module docstring) can never borrow across
# slots or go negative; the lanes, taken mod 2^32, are unchanged.
_BIAS = sum(1 << (62 + 64 * i) for i in range(8))

#: The least ``answer_keys`` (keys held in the answers of one step) when the cache is smaller.
MIN_ANSWER_KEYS = 65_536


class SummaryKeyStore:
    """Implements ``sync.recon.KeyStore`` (and ``range_fingerprints``); reads are requests."""

    def __init__(
        self,
        summary: BucketSummary | None = None,
        *,
        load: int = 256,
        max_buckets: int = 32768,
        cache_keys: int = 16_384,
        answer_keys: int | None = None,
    ) -> None:
        if cache_keys < 0:
            raise LocalProtocolError("cache_keys must be >= 0")
        self.summary = summary or BucketSummary(load=load, max_buckets=max_buckets)
        self.cache_keys = cache_keys
        #: Keys the answers of one step may hold (see the module docstring).
        self.answer_keys = max(cache_keys, MIN_ANSWER_KEYS) if answer_keys is None else answer_keys
        # bucket start -> (its keys, running wide sums); only reads that matched the summary.
        self._cache: OrderedDict[bytes, tuple[list[bytes], tuple[list[int], list[int]]]] = (
            OrderedDict())
        self._cached = 0
        # bucket start -> count the bucket must reach before a failed split is tried again.
        self._split_retry: dict[bytes, int] = {}
        # Start keys of buckets grown past 2 * load, to split once their reads are answered.
        self._oversized: set[bytes] = set()
        #: Bucket reads answered, and reads that did not match the summary.
        self.reads = 0
        self.mismatched_reads = 0
        #: Times the answers held were dropped at the bound (``answer_keys``).
        self.answers_dropped = 0
        self._answers: dict[RangeRead, list[bytes]] = {}
        # bucket start -> (an answered read that did not match the summary, its running sums):
        # not cached, but its sums serve the step's other bounds in that bucket (recomputed
        # from the front for each, a 60,000-range message over a log with commits the store
        # had not heard of yet hashed ~150 keys per bound).
        self._loose: dict[bytes, tuple[list[bytes], tuple[list[int], list[int]]]] = {}
        self._held: dict[bytes, bool] = {}
        self._want_ranges: dict[RangeRead, None] = {}
        self._want_present: dict[bytes, None] = {}
        # Reads found unanswered so far (a query that found none computed from answers only).
        self._misses = 0
        #: Keys held in the answers of the step being run.
        self.answered_keys = 0
        # What the step being run computed from answers (kept when answers are dropped).
        self._below_memo: dict[bytes, tuple[int, int]] = {}
        self._keys_memo: dict[tuple[bytes, bytes, int], tuple[list[bytes], bytes | None]] = {}
        self._rank_memo: dict[tuple[bytes, bytes, int], bytes | None] = {}

    def __len__(self) -> int:
        return self.summary.total

    @property
    def misses(self) -> int:
        """Reads found unanswered so far: a query during which it grew lacked a read (what it
        returned is void) and is made again once :meth:`wanted` has been answered."""
        return self._misses

    # -- updates ------------------------------------------------------------------------------

    def insert(self, key: bytes) -> bool:
        return self.insert_many([key]) == 1

    def insert_many(self, keys: Iterable[bytes]) -> int:
        """Account ``keys``, which the log now holds and the store has not accounted (the
        driver's word, after a commit); how many. Buckets grown too large are split now when
        cached, else once their reads are answered (:meth:`split_pending`)."""
        # Between steps: answers given before may lack the new keys.
        self.forget_answers()
        summary = self.summary
        added = 0
        for key in keys:
            bucket = summary.bucket_of(key)
            summary.add(bucket, wide_of(key))
            self._cache_insert(summary.starts[bucket], key)
            # By start key, not index: a split shifts the indices after it, a merge halves them.
            if summary.oversized(bucket):
                self._oversized.add(summary.starts[bucket])
            added += 1
        self.split_pending()
        return added

    def split_pending(self) -> None:
        """Split the buckets grown past ``2 * load`` whose keys are cached or answered; the
        others ask for their reads (:meth:`wanted`): answer them and call this again."""
        summary = self.summary
        todo, self._oversized = list(self._oversized), set()
        asked = 0  # keys the reads asked for may hold: one round's answers stay bounded
        while todo:
            start = todo.pop()
            bucket = summary.bucket_of(start)
            if not summary.oversized(bucket):
                continue
            if asked > self.answer_keys and not self._readable(bucket):
                self._oversized.add(start)
                continue
            halves = self._split(bucket)
            if halves is None:
                self._oversized.add(summary.starts[bucket])
                asked += summary.counts[bucket] + summary.load
            else:
                todo += halves

    def _readable(self, bucket: int) -> bool:
        """Whether reading ``bucket`` needs no request (cached or answered)."""
        summary = self.summary
        start = summary.starts[bucket]
        return start in self._cache or (
            start, summary.end_of(bucket), summary.counts[bucket] + summary.load) in self._answers

    def _split(self, bucket: int) -> list[bytes] | None:
        """Split ``bucket``; the start keys of its two halves (none when it must wait for more
        keys to be accounted; None when it waits for its read)."""
        summary = self.summary
        start = summary.starts[bucket]
        if summary.counts[bucket] < self._split_retry.get(start, 0):
            return []
        asked = self._misses
        keys, sums, exact = self._read(bucket)
        if self._misses > asked:
            return None
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

    # -- requests for reads, and their answers -------------------------------------------------

    def _answered(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes] | None:
        """The answer to a range read (None: not answered yet, recorded as wanted)."""
        got = self._answers.get((lo, hi, limit))
        if got is None:
            self._want_ranges[lo, hi, limit] = None
            self._misses += 1
        return got

    def _present(self, keys: Sequence[bytes]) -> set[bytes]:
        out: set[bytes] = set()
        for key in keys:
            held = self._held.get(key)
            if held is None:
                self._want_present[key] = None
                self._misses += 1
            elif held:
                out.add(key)
        return out

    def wanted(self) -> KeyReads | None:
        """After a query (or :meth:`split_pending`): the reads it lacked (it is made again
        once they are answered), or None when it had every answer (they are spent then)."""
        if not (self._want_ranges or self._want_present):
            self.forget_answers()
            return None
        reads = KeyReads(tuple(self._want_ranges), tuple(self._want_present))
        self._want_ranges.clear()
        self._want_present.clear()
        return reads

    def answer(self, answer: KeysRead) -> None:
        """The driver's answers to the reads asked for (``ReadKeys``, or :meth:`wanted`)."""
        reads = answer.reads
        size = sum(map(len, answer.keys))
        if self._answers and self.answered_keys + size > self.answer_keys:
            # Over the bound: what was computed from these answers is kept (the memos).
            self._answers.clear()
            self._loose.clear()
            self.answered_keys = 0
            self.answers_dropped += 1
        self._answers.update(zip(reads.ranges, answer.keys, strict=True))
        self.reads += len(reads.ranges)
        self.answered_keys += size
        for key in reads.present:
            self._held[key] = key in answer.held

    def forget_answers(self) -> None:
        """Drop the answers given (spent, or stale after an insert) and what was asked."""
        self._answers.clear()
        self._loose.clear()
        self._held.clear()
        self._want_ranges.clear()
        self._want_present.clear()
        self._below_memo.clear()
        self._keys_memo.clear()
        self._rank_memo.clear()
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
        """The keys of ``bucket`` (from the cache or the answers), their running wide sums as
        far as computed yet (see :meth:`_partial`), and whether the read matches the summary
        (only those are cached). Not answered yet: no keys, and the read is asked for."""
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
            got = self._answered(start, summary.end_of(bucket), count + summary.load)
            if got is None:  # asked for: this call is void
                return [], sums, False
            keys = got
        # The log only ever gains keys and holds every accounted one, so a read matching
        # the count holds exactly the accounted ones (all a split relies on).
        if len(keys) != count:
            self.mismatched_reads += 1
            loose = self._loose.get(start)
            if loose is None or loose[0] is not keys:
                loose = self._loose[start] = (keys, sums)
            return keys, loose[1], False
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
        if (memo := self._below_memo.get(key)) is not None:
            return memo
        asked = self._misses
        keys, sums, exact = self._read(bucket)
        off = bisect_left(keys, key)
        total = summary.wides[bucket] if exact else None
        below = wide + self._partial(keys, sums, off, total), count + off
        # Kept for the step's next runs: its bucket may be evicted and its answer dropped.
        if self._misses == asked:
            self._below_memo[key] = below
        return below

    # -- queries ------------------------------------------------------------------------------

    def contains(self, key: bytes) -> bool:
        return bool(self._present([key]))

    def contains_many(self, keys: Sequence[bytes]) -> set[bytes]:
        """Those of ``keys`` in the store, in one lookup."""
        return self._present(keys)

    def range_fingerprints(self, bounds: list[bytes]) -> list[tuple[int, bytes]]:
        """(count, 32-byte digest) of the adjacent ranges ``[bounds[i], bounds[i+1])``, which
        ascend. A bound whose bucket must be read is asked for, and what the call returns is
        void then (the session makes it again once answered). The bounds whose buckets are at
        hand are still looked up, so they are in the step's memo by then: each round settles
        every bound it answered, however the answers held are bounded and however the cache
        turns over meanwhile (stopping at the first bound that lacked, a 1,000-difference
        exchange over 400,000 keys asked round after round for answers the bound had dropped).
        The other bounds of a bucket already asked for are skipped, not looked up one by one
        (the void call for a 60,000-range flood message: 211 ms of CPU one by one, ~10 ms)."""
        summary = self.summary
        below: list[tuple[int, int]] = []
        lacked = False
        skip_until: bytes | None = b""  # the end of the last bucket found lacking (None: all)
        for bound in bounds:
            if lacked and (skip_until is None or bound < skip_until):
                continue
            asked = self._misses
            value = self._below(bound)
            if self._misses > asked:
                lacked = True
                skip_until = summary.end_of(summary.bucket_of(bound))
            elif not lacked:
                below.append(value)
        if lacked:
            return [(0, bytes(32))] * (len(bounds) - 1)
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
        at = (lo, hi, limit)
        bucket = summary.bucket_of(lo)
        # What the step's earlier runs read: the keys before the first bucket they lacked, and
        # that bucket's start (None: all of it), so a walk over several buckets needs no answer
        # twice (the answers of an earlier round may be gone).
        if (memo := self._keys_memo.get(at)) is not None:
            out = list(memo[0])
            if memo[1] is None:
                return out
            bucket = summary.bucket_of(memo[1])
        settled = True
        while len(out) < limit:
            asked = self._misses
            keys = self._read(bucket)[0] if summary.counts[bucket] else []
            if settled and self._misses > asked:
                settled = False
                self._keys_memo[at] = (list(out), summary.starts[bucket])
            i = bisect_left(keys, lo) if not out else 0
            j = bisect_left(keys, hi, i)
            out += keys[i : min(j, i + limit - len(out))]
            end = summary.end_of(bucket)
            if j < len(keys) or end is None or end >= hi:
                break
            bucket += 1
        if settled:
            self._keys_memo[at] = (list(out), None)
        return out

    def key_at(self, lo: bytes, hi: bytes, rank: int) -> bytes:
        if rank < 0:
            raise LocalProtocolError("key_at rank out of range")
        at = (lo, hi, rank)
        if at in self._rank_memo:
            if (memo := self._rank_memo[at]) is not None:
                return memo
        else:
            mismatched, asked = self.mismatched_reads, self._misses
            target = self._below(lo)[1] + rank
            if target < self.summary.total:
                bucket, within = self.summary.find(target)
                keys = self._read(bucket)[0]
                if within < len(keys) and lo <= keys[within] < hi:
                    if self._misses == asked:
                        self._rank_memo[at] = keys[within]
                    return keys[within]
            if self._misses == asked:
                if self.mismatched_reads == mismatched:
                    raise LocalProtocolError("key_at rank out of range")
                self._rank_memo[at] = None  # the read below serves, even once this one is gone
        # A read did not match the summary (keys not accounted yet): ask the log. Far ranks
        # get the range's first key, which serves a split as well, only less evenly; answers
        # are exact again once those keys are accounted.
        near = self._answered(lo, hi, rank + 1 if rank <= 2 * self.summary.load else 1)
        if near is None:  # asked for: any answer will do, this call is void
            return lo
        if not near or (len(near) <= rank and rank <= 2 * self.summary.load):
            raise LocalProtocolError("key_at rank out of range")
        return near[-1]
