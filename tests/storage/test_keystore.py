"""The SQL key store against the brute-force model and against the in-memory store."""

from __future__ import annotations

import random

from sqlalchemy import Engine

from storage import SqlKeyStore, append_events
from sync.recon import MemoryKeyStore
from sync.recon.pair import reconcile_in_memory
from tests.storage.conftest import make_record
from tests.sync.recon.helpers import FULL, BruteForceStore, Query, check_store_against_model


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
