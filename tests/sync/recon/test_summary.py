"""SummaryKeyStore (bucket summary, reads answered by its driver) answers exactly like
MemoryKeyStore."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import LocalProtocolError
from sync.recon import (
    BucketSummary,
    KeyStore,
    MemoryKeyStore,
    ReconConfig,
    SummaryKeyStore,
    answered,
    insert_keys,
    read_keys,
    reconcile_in_memory,
    wide_of,
)
from tests.sync.recon.helpers import (
    FULL,
    Answered,
    BruteForceStore,
    CommittedFirst,
    ListReader,
    Query,
    check_store_against_model,
)

keys_st = st.binary(min_size=0, max_size=3)
query_st = st.lists(
    st.tuples(keys_st, keys_st, keys_st, st.integers(0, 20)), min_size=1, max_size=30
)


def buckets_of(keys: list[bytes], load: int) -> list[tuple[bytes, int, int]]:
    """What ``storage.scan_buckets`` yields for these sorted keys (the start-up scan)."""
    out: list[tuple[bytes, int, int]] = []
    start, count, wide = b"", 0, 0
    for key in keys:
        if count == load:
            out.append((start, count, wide))
            start, count, wide = key, 0, 0
        count += 1
        wide += wide_of(key)
    out.append((start, count, wide))
    return out


def _same(store: KeyStore | Answered, memory: MemoryKeyStore, model: BruteForceStore,
          queries: list[Query]) -> None:
    check_store_against_model(store, model, queries)
    check_store_against_model(memory, model, queries)
    for lo, hi, probe, _ in queries:
        bounds = sorted({lo, hi, probe})
        assert store.range_fingerprints(bounds) == memory.range_fingerprints(bounds)  # type: ignore[attr-defined]


@settings(deadline=None, max_examples=150)
@given(
    inserts=st.lists(keys_st, max_size=300),
    queries=query_st,
    load=st.integers(1, 8),
    max_buckets=st.integers(2, 12),
    cache_keys=st.integers(0, 40),
)
def test_inserts_match_memory_store(
    inserts: list[bytes], queries: list[Query], load: int, max_buckets: int, cache_keys: int
) -> None:
    store = Answered(ListReader(), load=load, max_buckets=max_buckets, cache_keys=cache_keys)
    memory = MemoryKeyStore(load=load)
    model = BruteForceStore()
    for key in inserts:
        new = model.insert(key)
        assert store.insert(key) == new
        assert memory.insert(key) == new
    _same(store, memory, model, queries)
    assert len(store.summary) <= max_buckets
    assert store._cached <= cache_keys


@settings(deadline=None, max_examples=100)
@given(
    initial=st.sets(keys_st, max_size=300),
    more=st.lists(keys_st, max_size=100),
    queries=query_st,
    load=st.integers(1, 8),
    max_buckets=st.integers(2, 12),
)
def test_restored_summary_then_batches_of_inserts(
    initial: set[bytes], more: list[bytes], queries: list[Query], load: int, max_buckets: int
) -> None:
    """Start-up (the summary rebuilt from a scan), then keys that reach the table before the
    store hears of them, in batches as the node's writer commits them."""
    ordered = sorted(initial)
    source = CommittedFirst()
    source.model.items = list(ordered)
    summary = BucketSummary.restore(buckets_of(ordered, load), load=load, max_buckets=max_buckets)
    store = Answered(source, summary, cache_keys=16)
    memory = MemoryKeyStore.from_sorted(ordered, load=load)
    model = BruteForceStore()
    for key in ordered:
        model.insert(key)
    _same(store, memory, model, queries)
    fresh = list(dict.fromkeys(k for k in more if k not in initial))
    for i in range(0, len(fresh), 7):
        batch = fresh[i : i + 7]
        for key in batch:
            ListReader.add(source, key)  # committed: visible in the table ...
        for lo, hi, _, _ in queries[:3]:  # ... and read by sessions before the store is told
            inside = store.count(lo, hi)
            assert inside >= 0
            if inside > 1:
                assert lo <= store.key_at(lo, hi, inside // 2) < hi
        store.insert_many(batch)
        for key in batch:
            model.insert(key)
            memory.insert(key)
    _same(store, memory, model, queries)
    assert len(store.summary) <= max_buckets


@settings(deadline=None, max_examples=100)
@given(
    batches=st.lists(st.lists(keys_st, max_size=40), min_size=1, max_size=12),
    queries=query_st,
    load=st.integers(1, 4),
    # Few buckets: merges; 200: more splits than the trees follow without a rebuild.
    max_buckets=st.one_of(st.integers(2, 6), st.just(200)),
    cache_keys=st.integers(0, 24),
    committed_first=st.booleans(),
)
def test_many_splits_and_merges_between_queries(
    batches: list[list[bytes]], queries: list[Query], load: int, max_buckets: int,
    cache_keys: int, committed_first: bool
) -> None:
    """Small buckets and few of them: every batch splits and merges buckets, and the store is
    queried between batches (the trees are rebuilt lazily, cached buckets kept across inserts)."""
    source = CommittedFirst() if committed_first else ListReader()
    store = Answered(source, load=load, max_buckets=max_buckets, cache_keys=cache_keys)
    memory = MemoryKeyStore(load=load)
    model = BruteForceStore()
    for batch in batches:
        fresh = list(dict.fromkeys(k for k in batch if not model.contains(k)))
        if committed_first:
            for key in fresh:
                ListReader.add(source, key)
        assert store.insert_many(fresh if committed_first else batch) == len(fresh)
        for key in fresh:
            model.insert(key)
            memory.insert(key)
        _same(store, memory, model, queries[:4])
        assert len(store.summary) <= max_buckets
        assert store._cached <= cache_keys
    _same(store, memory, model, queries)
    assert sum(store.summary.counts) == store.summary.total == len(model.items)
    assert sum(store.summary.wides) == sum(map(wide_of, model.items))


@settings(deadline=None, max_examples=40)
@given(
    ours=st.sets(st.binary(min_size=1, max_size=4), max_size=400),
    theirs=st.sets(st.binary(min_size=1, max_size=4), max_size=400),
    load=st.integers(1, 16),
)
def test_sessions_split_and_answer_as_with_the_memory_store(
    ours: set[bytes], theirs: set[bytes], load: int
) -> None:
    """Same store answers, same Recon exchange: every split, hash and key list is identical."""
    config = ReconConfig(key_list_threshold=4)
    summary = Answered(ListReader(), load=load, max_buckets=6, cache_keys=8)
    summary.insert_many(sorted(ours))
    with_summary = reconcile_in_memory(summary, MemoryKeyStore.from_sorted(sorted(theirs)),
                                       FULL, FULL, config, apply=False)
    with_memory = reconcile_in_memory(MemoryKeyStore.from_sorted(sorted(ours)),
                                      MemoryKeyStore.from_sorted(sorted(theirs)),
                                      FULL, FULL, config, apply=False)
    assert with_summary == with_memory
    assert set(with_summary.initiator_missing) == theirs - ours
    assert set(with_summary.responder_missing) == ours - theirs


def test_memory_is_bounded_by_config_not_by_keys() -> None:
    keys = [i.to_bytes(4, "big") for i in range(0, 200_000, 7)]
    store = Answered(ListReader(), load=16, max_buckets=64, cache_keys=100)
    for i in range(0, len(keys), 1000):
        store.insert_many(keys[i : i + 1000])
    assert len(store) == len(keys)
    assert len(store.summary) <= 64
    assert store.summary.load > 16  # buckets merged pairwise as the log grew
    for lo, hi in pairwise(keys[:: len(keys) // 20]):
        assert store.count(lo, hi) == len(keys) // 20
    assert store._cached <= 100


def test_range_hash_reads_at_most_two_buckets() -> None:
    source = ListReader()
    store = Answered(source, load=64, max_buckets=1024, cache_keys=0)
    keys = [i.to_bytes(4, "big") for i in range(50_000)]
    store.insert_many(keys)
    source.reads = 0
    memory = MemoryKeyStore.from_sorted(keys)
    lo, hi = keys[3].ljust(5, b"\x01"), keys[-3].ljust(5, b"\x01")
    assert store.range_hash(lo, hi) == memory.range_hash(lo, hi)
    assert source.reads == 2


def test_bad_summaries_are_refused() -> None:
    with pytest.raises(LocalProtocolError):
        BucketSummary(load=0, max_buckets=4)
    with pytest.raises(LocalProtocolError):
        BucketSummary.restore([(b"a", 1, 1)], load=4, max_buckets=4)
    with pytest.raises(LocalProtocolError):
        BucketSummary.restore([(b"", 1, 1), (b"", 1, 1)], load=4, max_buckets=4)
    with pytest.raises(LocalProtocolError):
        SummaryKeyStore(cache_keys=-1)
    store = SummaryKeyStore()
    assert isinstance(store, KeyStore)
    with pytest.raises(LocalProtocolError):
        store.key_at(b"", b"\xff", 0)


def test_a_void_run_of_range_hashes_asks_every_read_in_one_round_a_bucket_once() -> None:
    """Once one bound's bucket must be read, the call is void: of the bounds after it, each
    bucket's first asks for its read and the others are skipped instead of being looked up one
    by one, so one round of answers still settles the batch (a flood's 60,000-range message:
    211 ms of CPU for the void call one by one, ``scripts/bench`` figures in
    docs/security.md)."""
    source = ListReader()
    keys = [i.to_bytes(4, "big") for i in range(20_000)]
    store = Answered(source, load=64, max_buckets=1024, cache_keys=0)
    store.insert_many(keys)
    inner = store.store
    bounds = sorted({k + b"\x01" for k in keys[5::37]})  # ~540 bounds over every bucket
    looked_up = 0
    below = inner._below

    def counting(key: bytes) -> tuple[int, int]:
        nonlocal looked_up
        looked_up += 1
        return below(key)

    inner._below = counting  # type: ignore[method-assign]
    inner.range_fingerprints(bounds)  # void: the first bound's bucket is not cached
    reads = inner.wanted()
    touched = {inner.summary.bucket_of(b) for b in bounds}
    assert reads is not None and looked_up == len(touched) < len(bounds)
    assert len(reads.ranges) == len(touched)  # each bucket once, all in this round
    inner.answer(read_keys(source, reads))
    memory = MemoryKeyStore.from_sorted(keys)
    assert inner.range_fingerprints(bounds) == memory.range_fingerprints(bounds)
    assert inner.wanted() is None


def test_range_hashes_settle_though_answers_are_dropped_and_the_cache_turns_over() -> None:
    """Each round settles every bound it answered, into the step's memo: a batch over many
    buckets settles in a few rounds even when the answers held are bounded below one round's
    worth and the buckets cached when it asked are evicted while it reads the answers (a
    1,000-difference exchange over 400,000 keys asked round after round when a call stopped
    at the first bound that lacked)."""
    source = ListReader()
    keys = [i.to_bytes(4, "big") for i in range(20_000)]
    for key in keys:
        source.add(key)
    store = SummaryKeyStore(load=64, max_buckets=1024, cache_keys=16 * 128, answer_keys=1000)
    insert_keys(store, keys, source)
    store._cache.clear()
    store._cached = 0
    warm = keys[::700]  # buckets cached when the batch asks, evicted while it reads answers
    answered(store, source, lambda: store.range_fingerprints(sorted(k + b"\x01" for k in warm)))
    bounds = sorted({k + b"\x01" for k in keys[5::37]})
    rounds = 0

    def query() -> list[tuple[int, bytes]]:
        nonlocal rounds
        rounds += 1
        return store.range_fingerprints(bounds)

    got = answered(store, source, query)
    assert got == MemoryKeyStore.from_sorted(keys).range_fingerprints(bounds)
    # One round of reads, then the call that settles (stopping at the first bound that
    # lacked took 40 calls here, and ran out of rounds on the 400,000-key exchange).
    assert rounds == 2 and store.answers_dropped > 0
