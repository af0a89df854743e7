"""Shared helpers of the Recon tests: a brute-force store model, key-set builders, and an
in-memory reader that answers a ``SummaryKeyStore``'s reads as the node's driver does."""

from __future__ import annotations

import bisect
import functools
import random
from collections.abc import Iterable, Sequence
from itertools import pairwise

import pytest

from sync.errors import LocalProtocolError
from sync.recon import KeyReader, KeyStore, Sha256a, SummaryKeyStore, answered, insert_keys
from sync.recon.buckets import BucketSummary

__all__ = ["FULL", "Answered", "BruteForceStore", "CommittedFirst", "ListReader", "Query",
           "check_store_against_model", "make_sets"]

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


class ListReader:
    """A sorted list (the brute-force model's) as the log a ``SummaryKeyStore``'s reads are
    answered from: the events table in the node (``storage.SqlKeyReader``)."""

    def __init__(self, keys: Iterable[bytes] = ()) -> None:
        self.model = BruteForceStore()
        self.model.items = sorted(set(keys))
        self.reads = 0

    def add(self, key: bytes) -> bool:
        """Commit ``key`` to the log; whether it is new there (the store is told only then)."""
        return self.model.insert(key)

    def present(self, keys: Sequence[bytes]) -> set[bytes]:
        return {k for k in keys if self.model.contains(k)}

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]:
        self.reads += 1
        items = self.model.items
        i = bisect.bisect_left(items, lo)
        j = len(items) if hi is None else bisect.bisect_left(items, hi)
        return items[i : min(j, i + limit)]


class CommittedFirst(ListReader):
    """A database table: keys are already in it when the store hears of them."""

    def add(self, key: bytes) -> bool:
        return True


#: What makes a store one that asks for its reads (``ReconSession`` looks for ``wanted``).
_ASKING = frozenset({"wanted", "misses", "answer", "forget_answers"})


class Answered:
    """A ``SummaryKeyStore`` driven as the node drives it, as a plain :class:`KeyStore`: each
    query runs again with the reads it asked for answered from ``reader``; an insert commits to
    the reader's log first (``reader.add``: new keys only) and then accounts the new keys."""

    def __init__(self, reader: KeyReader, summary: BucketSummary | None = None, *,
                 load: int = 256, max_buckets: int = 32768, cache_keys: int = 16_384,
                 store: SummaryKeyStore | None = None) -> None:
        self.reader = reader
        self.store = store or SummaryKeyStore(summary, load=load, max_buckets=max_buckets,
                                              cache_keys=cache_keys)

    def __getattr__(self, name: str) -> object:
        if name in _ASKING:  # it answers its own reads: a session sees a plain store
            raise AttributeError(name)
        return getattr(self.store, name)

    def __len__(self) -> int:
        return len(self.store)

    def insert(self, key: bytes) -> bool:
        return self.insert_many([key]) == 1

    def insert_many(self, keys: Iterable[bytes]) -> int:
        # A table (``SqlKeyReader``) holds the keys already: the caller committed them.
        add = getattr(self.reader, "add", None)
        new = [k for k in keys if add(k)] if add is not None else list(keys)
        return insert_keys(self.store, new, self.reader)

    def _run(self, name: str, *args: object) -> object:
        return answered(self.store, self.reader, functools.partial(getattr(self.store, name),
                                                                   *args))

    def contains(self, key: bytes) -> bool:
        return bool(self._run("contains", key))

    def contains_many(self, keys: Sequence[bytes]) -> set[bytes]:
        return set(self._run("contains_many", keys))  # type: ignore[call-overload]

    def range_fingerprints(self, bounds: list[bytes]) -> list[tuple[int, bytes]]:
        return list(self._run("range_fingerprints", bounds))  # type: ignore[call-overload]

    def range_hash(self, lo: bytes, hi: bytes) -> Sha256a:
        got = self._run("range_hash", lo, hi)
        assert isinstance(got, Sha256a)
        return got

    def count(self, lo: bytes, hi: bytes) -> int:
        return int(self._run("count", lo, hi))  # type: ignore[call-overload]

    def keys(self, lo: bytes, hi: bytes, limit: int) -> list[bytes]:
        return list(self._run("keys", lo, hi, limit))  # type: ignore[call-overload]

    def key_at(self, lo: bytes, hi: bytes, rank: int) -> bytes:
        return bytes(self._run("key_at", lo, hi, rank))  # type: ignore[call-overload]


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
