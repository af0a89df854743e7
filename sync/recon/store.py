"""Ordered key stores with O(log n) range hash and count.

``KeyStore`` is the small interface the reconciler needs; a SQL-backed store (``COUNT``/``SUM``
over the 8 lane columns for ``[lo, hi)``, ``ORDER BY recon_key LIMIT/OFFSET``) implements it too.

``MemoryKeyStore`` keeps the keys in sorted blocks (as sortedcontainers does). Each block holds
the running sum of the keys' :func:`wide_of` values, and a Fenwick tree sums whole blocks, so the
hash of the prefix ending at any position is one Fenwick walk plus one list read, and a range
hash is the difference of two prefix hashes: O(log n), never a scan of the range.

A second Fenwick tree over block sizes answers ``key_at`` by descent; block totals in the hash
tree also carry the block's key count above the lane slots, so one walk gives hash and rank.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate, pairwise
from typing import Protocol, runtime_checkable

from sync.errors import LocalProtocolError
from sync.recon.fenwick import Fenwick
from sync.recon.sha256a import Sha256a, digest_of_wide, wide_of

__all__ = ["EMPTY_HASH", "KeyStore", "MemoryKeyStore"]

EMPTY_HASH = Sha256a()


@runtime_checkable
class KeyStore(Protocol):
    """An ordered set of byte-string keys; every range is half-open, ``[lo, hi)``."""

    def insert(self, key: bytes) -> bool:
        """Add ``key``; True when it was not there before."""
        ...

    def contains(self, key: bytes) -> bool: ...

    def range_hash(self, lo: bytes, hi: bytes) -> Sha256a:
        """Sha256a (with the count) of the keys in ``[lo, hi)``."""
        ...

    def count(self, lo: bytes, hi: bytes) -> int: ...

    def keys(self, lo: bytes, hi: bytes, limit: int) -> list[bytes]:
        """Up to ``limit`` keys of ``[lo, hi)``, ascending."""
        ...

    def key_at(self, lo: bytes, hi: bytes, rank: int) -> bytes:
        """The ``rank``-th key (0-based) of ``[lo, hi)``; SQL: ``.. LIMIT 1 OFFSET rank``."""
        ...

    def __len__(self) -> int: ...


_LOAD = 512
# Block totals in the Fenwick tree carry the block's key count above the 8 lane slots, so one
# walk yields both the hash and the rank of a prefix.
_COUNT_SHIFT = 512
_WIDE_MASK = (1 << _COUNT_SHIFT) - 1


class MemoryKeyStore:
    """In-memory :class:`KeyStore`: sorted blocks, in-block prefix sums, Fenwick over blocks."""

    __slots__ = ("_blocks", "_counts", "_hashes", "_len", "_load", "_maxes", "_prefix")

    def __init__(self, *, load: int = _LOAD) -> None:
        if load < 1:
            raise LocalProtocolError("block load must be >= 1")
        self._load = load
        self._blocks: list[list[bytes]] = []
        self._prefix: list[list[int]] = []
        self._maxes: list[bytes] = []
        self._len = 0
        self._rebuild_index()

    @classmethod
    def from_sorted(cls, keys: Iterable[bytes], *, load: int = _LOAD) -> MemoryKeyStore:
        """Bulk load from strictly ascending keys: O(n), no per-key insertion."""
        ordered = keys if isinstance(keys, list) else list(keys)
        for a, b in pairwise(ordered):
            if not a < b:
                raise LocalProtocolError("from_sorted needs strictly ascending keys")
        store = cls(load=load)
        store._blocks = [ordered[i : i + load] for i in range(0, len(ordered), load)]
        store._prefix = [
            list(accumulate(map(wide_of, block), initial=0)) for block in store._blocks
        ]
        store._maxes = [block[-1] for block in store._blocks]
        store._len = len(ordered)
        store._rebuild_index()
        return store

    def _rebuild_index(self) -> None:
        self._hashes = Fenwick(
            [
                p[-1] + (len(b) << _COUNT_SHIFT)
                for p, b in zip(self._prefix, self._blocks, strict=True)
            ]
        )
        self._counts = Fenwick([len(b) for b in self._blocks])

    def __len__(self) -> int:
        return self._len

    def _locate(self, key: bytes) -> tuple[int, int]:
        """(block, offset) of the first key >= ``key``; (last block, its length) past the end."""
        b = bisect_left(self._maxes, key)
        if b == len(self._maxes):
            return (b - 1, len(self._blocks[b - 1])) if b else (0, 0)
        return b, bisect_left(self._blocks[b], key)

    def _rank(self, b: int, off: int) -> int:
        return self._counts.prefix(b) + off

    def contains(self, key: bytes) -> bool:
        b = bisect_left(self._maxes, key)
        if b == len(self._maxes):
            return False
        block = self._blocks[b]
        off = bisect_left(block, key)
        return block[off] == key

    def insert(self, key: bytes) -> bool:
        if not self._blocks:
            self._blocks, self._prefix, self._maxes = [[key]], [[0, wide_of(key)]], [key]
            self._len = 1
            self._rebuild_index()
            return True
        b = bisect_left(self._maxes, key)
        if b == len(self._maxes):
            b -= 1
        block = self._blocks[b]
        off = bisect_left(block, key)
        if off < len(block) and block[off] == key:
            return False
        wide = wide_of(key)
        block.insert(off, key)
        prefix = self._prefix[b]
        prefix[off + 1 :] = [p + wide for p in prefix[off:]]
        self._maxes[b] = block[-1]
        self._len += 1
        if len(block) > 2 * self._load:
            half = len(block) // 2
            self._blocks[b : b + 1] = [block[:half], block[half:]]
            self._prefix[b : b + 1] = [
                list(accumulate(map(wide_of, part), initial=0)) for part in self._blocks[b : b + 2]
            ]
            self._maxes[b : b + 1] = [block[half - 1], block[-1]]
            self._rebuild_index()
        else:
            self._hashes.add(b, wide + (1 << _COUNT_SHIFT))
            self._counts.add(b, 1)
        return True

    def _prefix_at(self, key: bytes) -> tuple[int, int]:
        """(sum of wide values, count) of the keys below ``key``."""
        if not self._blocks:
            return 0, 0
        b, off = self._locate(key)
        total = self._hashes.prefix(b)
        return (total & _WIDE_MASK) + self._prefix[b][off], (total >> _COUNT_SHIFT) + off

    def range_hashes(self, bounds: list[bytes]) -> list[Sha256a]:
        """Hashes of the adjacent ranges [bounds[i], bounds[i+1]): one lookup per bound.

        Not part of :class:`KeyStore`; the reconciler uses it when a store has it.
        """
        prefixes = [self._prefix_at(bound) for bound in bounds]
        return [
            Sha256a.from_wide(w2 - w1, c2 - c1) if c2 > c1 else EMPTY_HASH
            for (w1, c1), (w2, c2) in pairwise(prefixes)
        ]

    def range_fingerprints(self, bounds: list[bytes]) -> list[tuple[int, bytes]]:
        """(count, 32-byte digest) of adjacent ranges, skipping the :class:`Sha256a` objects."""
        prefixes = [self._prefix_at(bound) for bound in bounds]
        return [(c2 - c1, digest_of_wide(w2 - w1)) for (w1, c1), (w2, c2) in pairwise(prefixes)]

    def range_hash(self, lo: bytes, hi: bytes) -> Sha256a:
        if not lo < hi or not self._blocks:
            return EMPTY_HASH
        b1, o1 = self._locate(lo)
        b2, o2 = self._locate(hi)
        if b1 == b2:
            if o1 == o2:
                return EMPTY_HASH
            prefix = self._prefix[b1]
            return Sha256a.from_wide(prefix[o2] - prefix[o1], o2 - o1)
        total = self._hashes.prefix(b2) - self._hashes.prefix(b1)
        wide = (total & _WIDE_MASK) + self._prefix[b2][o2] - self._prefix[b1][o1]
        return Sha256a.from_wide(wide, (total >> _COUNT_SHIFT) + o2 - o1)

    def count(self, lo: bytes, hi: bytes) -> int:
        if not lo < hi or not self._blocks:
            return 0
        b1, o1 = self._locate(lo)
        b2, o2 = self._locate(hi)
        if b1 == b2:
            return o2 - o1
        return self._rank(b2, o2) - self._rank(b1, o1)

    def keys(self, lo: bytes, hi: bytes, limit: int) -> list[bytes]:
        out: list[bytes] = []
        if not lo < hi or not self._blocks or limit <= 0:
            return out
        b, off = self._locate(lo)
        blocks = self._blocks
        while b < len(blocks):
            block = blocks[b]
            end = bisect_left(block, hi, off) if block[-1] >= hi else len(block)
            out.extend(block[off : min(end, off + limit - len(out))])
            if end < len(block) or len(out) >= limit:
                break
            b, off = b + 1, 0
        return out

    def key_at(self, lo: bytes, hi: bytes, rank: int) -> bytes:
        if not self._blocks:
            raise LocalProtocolError("key_at rank out of range")
        b, off = self._locate(lo)
        if rank >= 0 and off + rank < len(self._blocks[b]):
            key = self._blocks[b][off + rank]
        else:
            target = self._rank(b, off) + rank
            if rank < 0 or target >= self._len:
                raise LocalProtocolError("key_at rank out of range")
            blk, within = self._counts.find(target)
            key = self._blocks[blk][within]
        if key >= hi:
            raise LocalProtocolError("key_at rank out of range")
        return key

    def overhead_bytes(self) -> int:
        """Bytes held by the structure beyond the key bytes themselves (for the benchmark).

        Counts the ``bytes`` object headers of the keys, the block lists, the per-key prefix
        sums and the Fenwick trees; the ``_maxes`` entries share the key objects.
        """
        total = sys.getsizeof(self._blocks) + sys.getsizeof(self._prefix)
        total += sys.getsizeof(self._maxes)
        for block, prefix in zip(self._blocks, self._prefix, strict=True):
            total += sys.getsizeof(block) + sys.getsizeof(prefix)
            total += sum(sys.getsizeof(k) - len(k) for k in block)
            total += sum(sys.getsizeof(p) for p in prefix)
        for tree in (self._hashes.tree, self._counts.tree):
            total += sys.getsizeof(tree) + sum(sys.getsizeof(v) for v in tree)
        return total
