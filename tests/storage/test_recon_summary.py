"""The Recon key store's saved summary: save, load with its watermark, every stale case falls
back to the full scan (SQLite and, with SYNCNODE_TEST_PG, PostgreSQL)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, select, update

from storage import (
    OpenedKeyStore,
    SqlKeyReader,
    append_events,
    events,
    log_matches,
    make_engine,
    open_key_store,
    recon_summary,
    save_summary,
    upgrade,
    write_transaction,
)
from sync.recon import BucketSummary, SummaryKeyStore, encode_summary, insert_keys
from tests.storage.conftest import make_record
from tests.sync.recon.helpers import Answered, BruteForceStore, Query, check_store_against_model
from tests.sync.recon.test_summary import buckets_of

LIMITS = {"load": 16, "max_buckets": 64, "cache_keys": 64}


def _fill(engine: Engine, indexes: range) -> list[bytes]:
    records = [make_record(i, sender=f"p{i % 5}") for i in indexes]
    with engine.begin() as conn:
        append_events(conn, records, received_at=0)
    return [r.recon_key for r in records]


def _open(engine: Engine) -> OpenedKeyStore:
    return open_key_store(engine, **LIMITS, rng=random.Random(3))


def _save(engine: Engine, opened: OpenedKeyStore, since: tuple[int, int] | None = None) -> bool:
    """As the node saves: the check of the rows since, then the write."""
    s = opened.store.summary
    blob = encode_summary(s.load, s.starts, s.counts, s.wides)
    with engine.connect() as conn:
        if not log_matches(conn, watermark=opened.watermark, total=opened.total,
                           since=since or (0, 0)):
            return False
    with write_transaction(engine) as conn:
        return save_summary(conn, blob, watermark=opened.watermark, total=opened.total,
                            now_ms=1)


def _check(engine: Engine, store: SummaryKeyStore, keys: list[bytes]) -> None:
    model = BruteForceStore()
    for key in keys:
        model.insert(key)
    ordered = sorted(keys)
    rng = random.Random(11)
    queries: list[Query] = [(b"", b"\xff" * 8, b"\x00missing", 5)]
    # Two distinct bounds need two keys; a one-key log is checked by the whole-range query.
    for _ in range(15 if len(ordered) >= 2 else 0):
        a, b = sorted(rng.sample(range(len(ordered)), 2))
        queries.append((ordered[a], ordered[b], ordered[rng.randrange(len(ordered))],
                        rng.randrange(0, 40)))
    # Its reads answered from the table, as the node's driver answers them.
    check_store_against_model(Answered(SqlKeyReader(engine), store=store), model, queries)


def test_saved_summary_then_only_newer_keys(engine: Engine) -> None:
    keys = _fill(engine, range(800))
    first = _open(engine)
    assert first.outcome == "scan_missing"
    assert (first.watermark, first.total) == (800, 800)
    assert _save(engine, first)
    keys += _fill(engine, range(1000, 1150))  # after the save: a crash before the next one
    second = _open(engine)
    assert second.outcome == "saved"
    assert (second.watermark, second.total, second.replayed) == (950, 950, 150)
    _check(engine, second.store, keys)
    # The next save checks only the rows since the last one.
    assert _save(engine, second, since=(800, 800))
    third = _open(engine)
    assert (third.outcome, third.replayed, third.total) == ("saved", 0, 950)
    _check(engine, third.store, keys)


def test_save_refused_when_the_log_disagrees(engine: Engine) -> None:
    _fill(engine, range(300))
    opened = _open(engine)
    assert _save(engine, opened)
    _fill(engine, range(1000, 1010))
    again = _open(engine)
    # Claims 10 keys were added since the last save when the log has 10 -> fine; 9 -> refused.
    assert not _save(engine, again, since=(300, 301))
    with write_transaction(engine) as conn:  # no event at the watermark: nothing written
        assert not save_summary(conn, b"x", watermark=5_000, total=5_000, now_ms=1)
    with engine.connect() as conn:
        assert conn.execute(select(recon_summary.c.watermark)).scalar_one() == 300


@pytest.mark.parametrize("damage", ["blob", "total", "watermark_key", "oversized"])
def test_damaged_row_falls_back_to_the_scan(engine: Engine, damage: str) -> None:
    keys = _fill(engine, range(500))
    assert _save(engine, _open(engine))
    with write_transaction(engine) as conn:
        row = conn.execute(select(recon_summary)).one()
        values: dict[str, object] = {
            "blob": {"summary": bytes(row.summary[:-1]) + bytes([row.summary[-1] ^ 1])},
            "total": {"total": row.total + 1},
            "watermark_key": {"watermark_key": b"another log"},
            "oversized": {"summary": bytes(row.summary) * 200},
        }[damage]
        conn.execute(update(recon_summary).values(**values))
    opened = _open(engine)
    expected = {"blob": "decode", "total": "decode", "watermark_key": "watermark",
                "oversized": "too_large"}[damage]
    assert opened.outcome == f"scan_{expected}"
    assert opened.total == 500
    _check(engine, opened.store, keys)


def test_summary_of_another_key_set_fails_the_sample(engine: Engine) -> None:
    keys = _fill(engine, range(600))
    assert _save(engine, _open(engine))
    # Same watermark, key and total, but the buckets of a different log (a buggy writer).
    fake = sorted(make_record(i, sender="elsewhere").recon_key for i in range(600))
    s = BucketSummary.restore(buckets_of(fake, 16), load=16, max_buckets=64)
    with write_transaction(engine) as conn:
        conn.execute(update(recon_summary).values(
            summary=encode_summary(s.load, s.starts, s.counts, s.wides)))
    opened = _open(engine)
    assert opened.outcome == "scan_sample"
    _check(engine, opened.store, keys)


def test_long_tail_and_deleted_events_fall_back_to_the_scan(engine: Engine) -> None:
    keys = _fill(engine, range(200))
    assert _save(engine, _open(engine))
    keys += _fill(engine, range(1000, 1100))  # more than a quarter of the saved keys
    opened = _open(engine)
    assert opened.outcome == "scan_tail"
    _check(engine, opened.store, keys)
    assert _save(engine, opened)
    with engine.begin() as conn:  # the trigger empties the saved summary
        conn.execute(delete(events).where(events.c.seq == 5))
        assert conn.execute(select(recon_summary.c.id)).first() is None
    assert _open(engine).outcome == "scan_missing"


def test_empty_log(engine: Engine) -> None:
    opened = _open(engine)
    assert (opened.outcome, opened.watermark, opened.total) == ("scan_missing", 0, 0)
    assert _save(engine, opened)
    assert _open(engine).outcome == "saved"
    keys = _fill(engine, range(50))  # a bootstrap into the empty database
    after = _open(engine)
    assert after.outcome == "scan_tail"
    _check(engine, after.store, keys)


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.integers(0, 60), st.booleans(), st.booleans()),
                      min_size=1, max_size=8))
def test_any_history_of_appends_saves_and_crashes_restores_the_log(
    steps: list[tuple[int, bool, bool]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Appends, saves now and then, restarts with or without a save since (a crash): every
    start-up holds exactly the log's keys, restored or rescanned (SQLite)."""
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('h') / 'n.db'}")
    upgrade(engine)
    try:
        keys: list[bytes] = []
        opened = _open(engine)
        since = (opened.watermark, opened.total)
        for n, save, restart in steps:
            keys += _fill(engine, range(len(keys), len(keys) + n))
            # As the node accounts a commit.
            insert_keys(opened.store, keys[len(keys) - n :], SqlKeyReader(engine))
            opened = OpenedKeyStore(opened.store, opened.watermark + n, opened.total + n, "")
            if save and _save(engine, opened, since):
                since = (opened.watermark, opened.total)
            if restart:
                opened = _open(engine)
                assert opened.outcome in ("saved", "scan_missing", "scan_tail")
                since = (opened.watermark, opened.total)
            assert (opened.total, opened.watermark) == (len(keys), len(keys))
            if keys:
                _check(engine, opened.store, keys)
    finally:
        engine.dispose()
