"""Shared helpers of the Recon tests: a brute-force store model and key-set builders."""

from __future__ import annotations

import bisect
import random
from itertools import pairwise

import pytest

from sync.errors import LocalProtocolError
from sync.recon import KeyStore, Sha256a

__all__ = ["FULL", "BruteForceStore", "Query", "check_store_against_model", "make_sets"]

Query = tuple[bytes, bytes, bytes, int]  # lo, hi, a key to probe, a limit

FULL = ((b"", b"\xff" * 8),)


class BruteForceStore:
    """The obvious O(n) model of :class:`KeyStore`."""

    def __init__(self) -> None:
        self.items: list[bytes] = []

    def insert(self, key: bytes) -> bool:
        i = bisect.bisect_left(self.items, key)
        if i < len(self.items) and self.items[i] == key:
            return False
        self.items.insert(i, key)
        return True

    def contains(self, key: bytes) -> bool:
        return key in self.items

    def _range(self, lo: bytes, hi: bytes) -> list[bytes]:
        return [k for k in self.items if lo <= k < hi]

    def range_hash(self, lo: bytes, hi: bytes) -> Sha256a:
        return Sha256a.of(self._range(lo, hi))

    def count(self, lo: bytes, hi: bytes) -> int:
        return len(self._range(lo, hi))

    def keys(self, lo: bytes, hi: bytes, limit: int) -> list[bytes]:
        return self._range(lo, hi)[: max(0, limit)]

    def key_at(self, lo: bytes, hi: bytes, rank: int) -> bytes:
        return self._range(lo, hi)[rank]

    def __len__(self) -> int:
        return len(self.items)


def make_sets(seed: int, mode: str, size: int) -> tuple[set[bytes], set[bytes]]:
    """Two key sets of short keys (1-4 bytes, many sharing prefixes) in a given relation."""
    rng = random.Random(seed)
    pool = {rng.randbytes(rng.randint(1, 4)) for _ in range(2 * size + 2)}
    keys = sorted(pool)
    rng.shuffle(keys)
    if mode == "empty":
        return set(), set(keys[:size])
    if mode == "equal":
        return set(keys[:size]), set(keys[:size])
    if mode == "disjoint":
        return set(keys[:size]), set(keys[size : 2 * size])
    if mode == "subset":
        return set(keys[: size // 3]), set(keys[:size])
    a = {k for k in keys[: 2 * size] if rng.random() < 0.6}
    b = {k for k in keys[: 2 * size] if rng.random() < 0.6}
    return a, b


def check_store_against_model(
    store: KeyStore, model: BruteForceStore, queries: list[Query]
) -> None:
    """Every :class:`KeyStore` method of ``store`` agrees with the model (also for a SQL store)."""
    assert len(store) == len(model)
    for lo, hi, probe, limit in queries:
        assert store.range_hash(lo, hi) == model.range_hash(lo, hi)
        assert store.count(lo, hi) == model.count(lo, hi)
        bounds = sorted({lo, hi, probe})
        expected = [model.range_hash(a, b) for a, b in pairwise(bounds)]
        batch = getattr(store, "range_hashes", None)
        if batch is not None:
            assert batch(bounds) == expected
        fingerprints = getattr(store, "range_fingerprints", None)
        if fingerprints is not None:
            assert fingerprints(bounds) == [(h.count, h.digest()) for h in expected]
        assert store.keys(lo, hi, limit) == model.keys(lo, hi, limit)
        assert store.contains(probe) == model.contains(probe)
        inside = model._range(lo, hi)
        for rank in {0, len(inside) // 2, len(inside) - 1}:
            if 0 <= rank < len(inside):
                assert store.key_at(lo, hi, rank) == inside[rank]
        with pytest.raises(LocalProtocolError):
            store.key_at(lo, hi, len(inside))
