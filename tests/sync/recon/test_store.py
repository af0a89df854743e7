"""MemoryKeyStore against a brute-force sorted-list model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import LocalProtocolError
from sync.recon import KeyStore, MemoryKeyStore, Sha256a
from tests.sync.recon.helpers import BruteForceStore, Query, check_store_against_model

keys_st = st.binary(min_size=0, max_size=3)
bound_st = st.binary(min_size=0, max_size=3)


query_st = st.lists(
    st.tuples(bound_st, bound_st, keys_st, st.integers(0, 20)), min_size=1, max_size=30
)


@settings(deadline=None, max_examples=150)
@given(
    inserts=st.lists(keys_st, max_size=300),
    queries=query_st,
    load=st.integers(1, 8),
)
def test_inserts_match_brute_force(inserts: list[bytes], queries: list[Query], load: int) -> None:
    store = MemoryKeyStore(load=load)
    model = BruteForceStore()
    for key in inserts:
        assert store.insert(key) == model.insert(key)
    check_store_against_model(store, model, queries)


@settings(deadline=None, max_examples=100)
@given(
    initial=st.sets(keys_st, max_size=200),
    more=st.lists(keys_st, max_size=100),
    queries=query_st,
    load=st.integers(1, 8),
)
def test_bulk_load_then_insert(
    initial: set[bytes], more: list[bytes], queries: list[Query], load: int
) -> None:
    store = MemoryKeyStore.from_sorted(sorted(initial), load=load)
    model = BruteForceStore()
    for key in sorted(initial):
        model.insert(key)
    check_store_against_model(store, model, queries)
    for key in more:
        assert store.insert(key) == model.insert(key)
    check_store_against_model(store, model, queries)


def test_protocol_and_bulk_loader_rejects_unsorted() -> None:
    assert isinstance(MemoryKeyStore(), KeyStore)
    assert isinstance(BruteForceStore(), KeyStore)
    with pytest.raises(LocalProtocolError):
        MemoryKeyStore.from_sorted([b"b", b"a"])
    with pytest.raises(LocalProtocolError):
        MemoryKeyStore.from_sorted([b"a", b"a"])


def test_empty_store_and_empty_ranges() -> None:
    store = MemoryKeyStore()
    assert store.range_hash(b"", b"\xff") == Sha256a()
    assert store.count(b"", b"\xff") == 0 and store.keys(b"", b"\xff", 5) == []
    assert not store.contains(b"x")
    store.insert(b"m")
    assert store.range_hash(b"z", b"a") == Sha256a() and store.count(b"m", b"m") == 0
    assert store.overhead_bytes() > 0


def test_overhead_per_key_is_bounded() -> None:
    keys = sorted({i.to_bytes(4, "big") * 17 for i in range(20_000)})
    store = MemoryKeyStore.from_sorted(keys)
    assert store.overhead_bytes() / len(keys) <= 250
