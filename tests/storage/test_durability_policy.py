"""The durability policy per origin (docs/node.md, "Durability contract"): a transaction with
our own events commits at the full level, one with only relayed events at the relayed level.

SQLite: ``PRAGMA synchronous`` of the committing connection (2 = FULL, 1 = NORMAL), read at the
commit itself. PostgreSQL: ``synchronous_commit`` of the transaction (``SET LOCAL``).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from sqlalchemy import Connection, Engine, event

from node.store.events import EventStore
from storage import append_events, make_engine, upgrade, weaker_level, write_transaction
from tests.storage.conftest import make_record

_SQLITE_LEVELS = {1: "NORMAL", 2: "FULL"}


def _level(conn: Connection) -> str:
    if conn.dialect.name == "sqlite":
        return _SQLITE_LEVELS[int(conn.exec_driver_sql("PRAGMA synchronous").scalar_one())]
    setting = conn.exec_driver_sql("SHOW synchronous_commit").scalar_one()
    return "NORMAL" if setting == "off" else "FULL"


def _engine(db_url: str, **levels: str) -> Engine:
    engine = make_engine(db_url, **levels)
    upgrade(engine)
    return engine


def _commits(engine: Engine) -> list[tuple[str, int]]:
    """(level, events in the log) at each commit of ``engine``, as it happens."""
    levels: list[tuple[str, int]] = []

    @event.listens_for(engine, "commit")
    def _on_commit(conn: Any) -> None:
        count = conn.exec_driver_sql("SELECT count(*) FROM events").scalar_one()
        levels.append((_level(conn), count))

    return levels


def test_own_transactions_full_relayed_normal(db_url: str) -> None:
    engine = _engine(db_url, relayed_synchronous="NORMAL")
    try:
        seen = []
        for durable in (True, False, False, True, False):
            with write_transaction(engine, durable=durable) as conn:
                append_events(conn, [make_record(len(seen))], received_at=0)
                seen.append(_level(conn))
        assert seen == ["FULL", "NORMAL", "NORMAL", "FULL", "NORMAL"]
        # Outside our write transactions the engine keeps its configured level.
        with engine.begin() as conn:
            assert _level(conn) == "FULL"
    finally:
        engine.dispose()


def test_relayed_level_never_stronger_than_the_configured_one(db_url: str) -> None:
    assert weaker_level("NORMAL", "FULL") == weaker_level("FULL", "NORMAL") == "NORMAL"
    engine = _engine(db_url, sqlite_synchronous="FULL", relayed_synchronous="FULL")
    try:
        with write_transaction(engine, durable=False) as conn:
            assert _level(conn) == "FULL"
    finally:
        engine.dispose()
    with pytest.raises(ValueError, match="relayed_synchronous"):
        make_engine(db_url, relayed_synchronous="OFF")


def test_event_store_commits_each_batch_at_its_origins_level(db_url: str) -> None:
    """``append`` (a publish, acknowledged after its commit) is FULL; ``submit`` and
    ``submit_fetched`` (relayed, fetched) are NORMAL; a batch holding both is FULL."""
    engine = _engine(db_url, relayed_synchronous="NORMAL")
    levels = _commits(engine)

    async def main() -> None:
        store = EventStore(engine, max_delay_ms=0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run_writer)
            await store.append([make_record(0)])
            store.submit([make_record(1)])
            store.submit_fetched([make_record(2)])
            await store.wait_room(1)
            # Mixed: relayed and own events queued together commit as one FULL batch.
            store.submit([make_record(3)])
            await store.append([make_record(4)])
            await store.close()

    trio.run(main)
    engine.dispose()
    # Queued before the writer ran, each pair is gathered into one batch.
    assert levels == [("FULL", 1), ("NORMAL", 3), ("FULL", 5)]


def test_relayed_batches_gather_longer_and_a_publish_ends_the_wait(db_url: str) -> None:
    """``relayed_delay_ms`` (issue 31): a batch that starts with relayed events waits that long
    for more (two gossip arrivals 0.2 s apart share one NORMAL commit), and a publish arriving
    meanwhile ends the wait within ``max_delay_ms``, sharing its FULL commit."""
    engine = _engine(db_url, relayed_synchronous="NORMAL")
    levels = _commits(engine)

    publish_wait: list[float] = []

    async def main() -> None:
        # 30 s: far beyond any scheduling delay of a loaded machine, so only the arrival of
        # the publish can end the second batch early.
        store = EventStore(engine, max_delay_ms=5, relayed_delay_ms=30_000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run_writer)
            store.submit([make_record(0)])
            await trio.sleep(0.2)
            store.submit([make_record(1)])
            await store.close()
        assert levels == [("NORMAL", 2)]
        store = EventStore(engine, max_delay_ms=5, relayed_delay_ms=30_000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run_writer)
            store.submit([make_record(2)])
            await trio.sleep(0.2)
            started = trio.current_time()
            await store.append([make_record(3)])
            publish_wait.append(trio.current_time() - started)
            await store.close()

    trio.run(main)
    engine.dispose()
    assert levels == [("NORMAL", 2), ("FULL", 4)]
    assert publish_wait[0] < 15, publish_wait  # not the relayed batch's 30 s
