"""The SQL key store against the brute-force model and against the in-memory store."""

from __future__ import annotations

import random

from sqlalchemy import Engine

from storage import SqlKeyReader, SqlKeyStore, append_events, open_summary_store, scan_buckets
from sync.recon import MemoryKeyStore, wide_of
from sync.recon.pair import reconcile_in_memory
from tests.storage.conftest import make_record
from tests.sync.recon.helpers import (
    FULL,
    Answered,
    BruteForceStore,
    Query,
    check_store_against_model,
)


def _fill(engine: Engine, indexes: list[int]) -> list[bytes]:
    records = [make_record(i, sender=f"p{i % 5}") for i in indexes]
    with engine.begin() as conn:
        append_events(conn, records, received_at=0)
    return [r.recon_key for r in records]


def test_sql_store_agrees_with_the_model(engine: Engine) -> None:
    keys = _fill(engine, list(range(400)))
    model = BruteForceStore()
    for key in keys:
        model.insert(key)
    store = SqlKeyStore(engine)
    rng = random.Random(5)
    ordered = sorted(keys)
    queries: list[Query] = []
    for _ in range(25):
        a, b = sorted(rng.sample(range(len(ordered)), 2))
        probe = rng.choice([ordered[rng.randrange(len(ordered))], b"\x00missing"])
        queries.append((ordered[a], ordered[b], probe, rng.randrange(0, 12)))
    queries.append((b"", b"\xff" * 8, ordered[0], 3))
    check_store_against_model(store, model, queries)
    assert store.insert(keys[0]) is False


def test_sql_and_memory_stores_reconcile_with_each_other(engine: Engine) -> None:
    shared = list(range(300))
    sql_keys = set(_fill(engine, [*shared, *range(1000, 1040)]))
    memory_keys = {make_record(i, sender=f"p{i % 5}").recon_key
                   for i in [*shared, *range(2000, 2025)]}
    memory = MemoryKeyStore.from_sorted(sorted(memory_keys))
    result = reconcile_in_memory(memory, SqlKeyStore(engine), FULL, FULL, apply=False)
    assert set(result.initiator_missing) == sql_keys - memory_keys
    assert set(result.responder_missing) == memory_keys - sql_keys
    assert result.round_trips <= 3


def test_summary_store_on_the_events_table(engine: Engine) -> None:
    """Start-up scan, then events committed in batches and reported after the commit."""
    keys = _fill(engine, list(range(700)))
    store = Answered(SqlKeyReader(engine),  # its reads answered from the table, as the node does
                     store=open_summary_store(engine, load=16, max_buckets=32, cache_keys=64))
    memory = MemoryKeyStore.from_sorted(sorted(keys))
    assert len(store) == 700
    assert len(store.summary) <= 32
    rng = random.Random(9)
    for start in range(1000, 1400, 100):
        batch = _fill(engine, list(range(start, start + 100)))
        ordered = sorted(keys)
        lo, hi = sorted(rng.sample(ordered, 2))
        assert lo <= store.key_at(lo, hi, store.count(lo, hi) // 2) < hi  # not accounted yet
        assert store.insert_many(batch) == 100
        keys += batch
        for key in batch:
            memory.insert(key)
    model = BruteForceStore()
    for key in keys:
        model.insert(key)
    ordered = sorted(keys)
    queries: list[Query] = []
    for _ in range(20):
        a, b = sorted(rng.sample(range(len(ordered)), 2))
        queries.append((ordered[a], ordered[b], ordered[rng.randrange(len(ordered))],
                        rng.randrange(0, 40)))
    queries.append((b"", b"\xff" * 8, b"\x00missing", 5))
    check_store_against_model(store, model, queries)
    bounds = [b"", *ordered[::97], b"\xff"]
    assert store.range_fingerprints(bounds) == memory.range_fingerprints(bounds)
    assert store.contains_many([keys[0], b"\x00missing"]) == {keys[0]}
    assert len(store.summary) <= 32 and store.summary.load > 16


def test_scan_buckets_covers_every_key_once(engine: Engine) -> None:
    keys = sorted(_fill(engine, list(range(250))))
    buckets = list(scan_buckets(engine, 40, page=33))
    assert [b[0] for b in buckets] == [b"", *keys[40::40]]
    assert sum(b[1] for b in buckets) == 250
    assert sum(b[2] for b in buckets) == sum(map(wide_of, keys))
