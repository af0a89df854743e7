"""The in-memory part of a Recon key store whose keys live elsewhere (a database table).

The key space is cut into buckets at sorted boundaries; bucket ``i`` holds the keys of
``[starts[i], starts[i + 1])`` (the first starts at ``b""``, the last runs to the end). For each
bucket only its key count and the sum of its keys' :func:`~sync.recon.sha256a.wide_of` values are
kept, with Fenwick trees over both, so the hash and count of every key below a bucket's start is
one O(log buckets) walk (a split does not rebuild them: see ``_pending``). A range hash then
needs, besides whole buckets, only the keys of the two buckets its bounds fall in (the store
loads those, see :mod:`sync.recon.summary`).

Memory is bounded by ``max_buckets``, not by the number of keys: a bucket is split in two when it
holds more than ``2 * load`` keys, and when that makes more than ``max_buckets`` buckets,
neighbours are merged pairwise and ``load`` doubles (so buckets grow with the log instead).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from sync.errors import LocalProtocolError
from sync.recon.fenwick import Fenwick

__all__ = ["BucketSummary"]

# Hash-tree values carry the bucket's key count above the 8 lane slots (as MemoryKeyStore's
# blocks do), so one walk gives both the hash and the rank below a bucket.
_COUNT_SHIFT = 512
_WIDE_MASK = (1 << _COUNT_SHIFT) - 1
# Splits the trees follow without a rebuild (see BucketSummary._pending); a query walks at most
# this many more buckets, and a rebuild (O(buckets)) comes at most once per this many splits.
_MAX_PENDING = 64


class BucketSummary:
    """Sorted bucket boundaries with the count and wide hash sum of each bucket."""

    __slots__ = ("_hashes", "_pending", "_ranks", "_stale", "counts", "load", "max_buckets",
                 "starts", "total", "wides")

    def __init__(self, *, load: int, max_buckets: int) -> None:
        if load < 1 or max_buckets < 2:
            raise LocalProtocolError("bucket load must be >= 1 and max_buckets >= 2")
        self.load = load
        self.max_buckets = max_buckets
        self.starts: list[bytes] = [b""]
        self.counts: list[int] = [0]
        self.wides: list[int] = [0]
        self.total = 0
        self._reindex()

    @classmethod
    def restore(
        cls, buckets: Iterable[tuple[bytes, int, int]], *, load: int, max_buckets: int
    ) -> BucketSummary:
        """From ``(start, count, wide sum)`` per bucket, ascending, the first starting at b"".

        Streams: at most ``max_buckets`` buckets are held at any time (pairs merge as needed).
        """
        summary = cls(load=load, max_buckets=max_buckets)
        starts: list[bytes] = []
        counts: list[int] = []
        wides: list[int] = []
        for start, count, wide in buckets:
            if (not starts and start != b"") or (starts and not starts[-1] < start):
                raise LocalProtocolError("bucket starts must ascend from b''")
            if count < 0 or wide < 0:
                raise LocalProtocolError("negative bucket count or hash sum")
            starts.append(start)
            counts.append(count)
            wides.append(wide)
            if len(starts) > max_buckets:
                starts, counts, wides = _merged_pairs(starts, counts, wides)
                summary.load *= 2
        if starts:
            summary.starts, summary.counts, summary.wides = starts, counts, wides
            summary.total = sum(counts)
            summary._reindex()
        return summary

    def _reindex(self) -> None:
        # The trees index the buckets as they were at the last rebuild: a split since leaves its
        # bucket's tree value right (the halves sum to it), so instead of rebuilding, the index
        # of each new right half is kept in ``_pending`` (ascending) and a query maps a bucket
        # to its tree slot and adds the halves before it in that slot from the lists. A merge
        # moves every bucket: ``_stale`` then, and the next query rebuilds.
        self._stale = False
        self._pending: list[int] = []
        self._hashes = Fenwick(
            [w + (c << _COUNT_SHIFT) for w, c in zip(self.wides, self.counts, strict=True)]
        )
        self._ranks = Fenwick(list(self.counts))

    def __len__(self) -> int:
        return len(self.starts)

    def bucket_of(self, key: bytes) -> int:
        return bisect_right(self.starts, key) - 1

    def end_of(self, bucket: int) -> bytes | None:
        """The first key past ``bucket`` (None for the last bucket)."""
        return self.starts[bucket + 1] if bucket + 1 < len(self.starts) else None

    def _slot(self, bucket: int) -> tuple[int, int]:
        """(tree slot holding ``bucket``, first bucket of that slot) while splits are pending."""
        pending = self._pending
        first = bucket
        below = bisect_right(pending, bucket)
        while below and pending[below - 1] == first:
            first -= 1
            below -= 1
        return first - below, first

    def _current(self) -> None:
        if self._stale or len(self._pending) > _MAX_PENDING:
            self._reindex()

    def before(self, bucket: int) -> tuple[int, int]:
        """(wide sum, count) of every key in the buckets before ``bucket``."""
        self._current()
        if not self._pending:
            total = self._hashes.prefix(bucket)
            return total & _WIDE_MASK, total >> _COUNT_SHIFT
        slot, first = self._slot(bucket)
        total = self._hashes.prefix(slot)
        wide, count = total & _WIDE_MASK, total >> _COUNT_SHIFT
        for b in range(first, bucket):
            wide += self.wides[b]
            count += self.counts[b]
        return wide, count

    def find(self, rank: int) -> tuple[int, int]:
        """(bucket, rank within it) of the key of 0-based ``rank`` (rank < total)."""
        self._current()
        slot, within = self._ranks.find(rank)
        pending = self._pending
        if not pending:
            return slot, within
        # The first bucket of the slot: the slot-th (0-based) index not in ``pending``.
        bucket = slot
        while (nxt := slot + bisect_right(pending, bucket)) != bucket:
            bucket = nxt
        while within >= self.counts[bucket] and bucket + 1 < len(self.counts):
            within -= self.counts[bucket]
            bucket += 1
        return bucket, within

    def add(self, bucket: int, wide: int) -> None:
        """Account one new key (of ``wide`` value) in ``bucket``."""
        self.counts[bucket] += 1
        self.wides[bucket] += wide
        self.total += 1
        if self._stale:  # the next query rebuilds the trees from the lists
            return
        slot = self._slot(bucket)[0] if self._pending else bucket
        self._hashes.add(slot, wide + (1 << _COUNT_SHIFT))
        self._ranks.add(slot, 1)

    def oversized(self, bucket: int) -> bool:
        return self.counts[bucket] > 2 * self.load

    def split(self, bucket: int, keys: Sequence[bytes], left: int) -> bool:
        """Cut ``bucket`` in two at its middle key ``keys[len(keys) // 2]``.

        ``keys`` are the bucket's keys, ascending, and ``left`` the sum of the wide values of
        the half below the middle key (the other half's is the bucket's sum less it). The keys
        must be exactly the accounted ones; a read of a key table that only ever gains keys is,
        when its length is the bucket's count, so the count is checked here (a table may hold
        keys not accounted yet): False, and no change, when it differs.
        """
        if len(keys) != self.counts[bucket] or len(keys) < 2 or not 0 <= left <= self.wides[bucket]:
            return False
        half = len(keys) // 2
        self.starts.insert(bucket + 1, keys[half])
        self.counts[bucket : bucket + 1] = [half, len(keys) - half]
        self.wides[bucket : bucket + 1] = [left, self.wides[bucket] - left]
        if len(self.starts) > self.max_buckets:
            self.starts, self.counts, self.wides = _merged_pairs(
                self.starts, self.counts, self.wides
            )
            self.load *= 2
            self._stale = True
        elif not self._stale:
            pending = self._pending
            at = bisect_left(pending, bucket + 1)
            pending[at:] = [bucket + 1] + [b + 1 for b in pending[at:]]
            self._stale = len(pending) > _MAX_PENDING
        return True


def _merged_pairs(
    starts: list[bytes], counts: list[int], wides: list[int]
) -> tuple[list[bytes], list[int], list[int]]:
    """Buckets 2i and 2i+1 merged: half as many buckets, each twice as large."""
    return (
        starts[0::2],
        [sum(counts[i : i + 2]) for i in range(0, len(counts), 2)],
        [sum(wides[i : i + 2]) for i in range(0, len(wides), 2)],
    )
