"""One event no backend can store never fails the batch it travels in (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses

import pytest
import trio
from sqlalchemy import Engine

from node.store.events import EventStore, StoreRejected
from storage import (
    EventRecord,
    append_events,
    append_isolating,
    count_events,
    read_channel,
    record_problem,
)
from tests.storage.conftest import make_record
from tests.storage.store_reports import Reports

POISON = (1 << 64) - (1 << 32) - 1


def bad_records() -> list[EventRecord]:
    base = [make_record(100 + i) for i in range(4)]
    return [
        dataclasses.replace(base[0], lamport=POISON),
        dataclasses.replace(base[1], lamport=-1),
        dataclasses.replace(base[2], sender="s" * 129),
        dataclasses.replace(base[3], message_id=""),
    ]


def test_record_problem_names_each_unstorable_field() -> None:
    assert record_problem(make_record(1)) is None
    problems = [record_problem(r) for r in bad_records()]
    assert all(problems), problems
    assert "lamport" in str(problems[0]) and "sender" in str(problems[2])


def test_bad_events_are_left_out_and_the_rest_stored(engine: Engine) -> None:
    good = [make_record(i) for i in range(6)]
    bad = bad_records()
    batch = [good[0], bad[0], *good[1:3], bad[1], bad[2], *good[3:], bad[3]]
    with engine.begin() as conn:
        result = append_events(conn, batch, received_at=1)
    assert sorted(m for _, m in result.inserted) == sorted(r.message_id for r in good)
    assert {m for m, _ in result.rejected} == {r.message_id for r in bad}
    with engine.connect() as conn:
        assert count_events(conn) == len(good)
        assert {e.message_id for e in read_channel(conn, "general")} == {
            r.message_id for r in good}


def test_event_store_fails_only_the_bad_event(engine: Engine) -> None:
    store = EventStore(engine, max_batch=64, max_delay_ms=50, reports=True)
    good = [make_record(i) for i in range(5)]
    poison = bad_records()[0]

    async def main() -> tuple[object, list[object]]:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)
            results: list[object] = []

            async def append(records: list[EventRecord]) -> None:
                try:
                    results.append(await store.append(records))
                except StoreRejected as exc:
                    results.append(exc)

            # All queued in the same batch window: they commit together.
            for record in good[:2]:
                nursery.start_soon(append, [record])
            nursery.start_soon(append, [poison])
            store.submit(good[2:])
            await trio.sleep(0.3)
            await store.close()
        return results[0], results

    _, results = trio.run(main)
    assert sum(isinstance(r, StoreRejected) for r in results) == 1
    assert Reports(store).take().failed == [poison.message_id]
    with engine.connect() as conn:
        assert count_events(conn) == len(good)


def _refuse_in_database(engine: Engine, message_id: str) -> None:
    """A trigger that fails the insert of one event: an error no check of ours foresees."""
    with engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.message_id = "
                f"'{message_id}' BEGIN SELECT RAISE(ABORT, 'refused'); END")
        else:
            conn.exec_driver_sql(
                "CREATE OR REPLACE FUNCTION refuse() RETURNS trigger AS $$ BEGIN "
                f"IF NEW.message_id = '{message_id}' THEN RAISE EXCEPTION 'refused'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql")
            conn.exec_driver_sql("CREATE TRIGGER refuse BEFORE INSERT ON events "
                                 "FOR EACH ROW EXECUTE FUNCTION refuse()")


def test_a_failing_batch_is_retried_row_by_row(engine: Engine) -> None:
    store = EventStore(engine, max_batch=64, max_delay_ms=50, reports=True)
    good = [make_record(i) for i in range(6)]
    refused = make_record(50)
    _refuse_in_database(engine, refused.message_id)
    errors: list[BaseException] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)

            async def append(records: list[EventRecord]) -> None:
                try:
                    await store.append(records)
                except Exception as exc:
                    errors.append(exc)

            store.submit(good[:3])
            nursery.start_soon(append, [refused])
            store.submit(good[3:])
            await trio.sleep(0.3)
            await store.close()

    trio.run(main)
    with engine.connect() as conn:
        assert count_events(conn) == len(good)
    reports = Reports(store).take()
    assert reports.failed == [refused.message_id]
    assert len(errors) == 1 and "refused" in str(errors[0])
    assert sorted(reports.committed) == sorted(r.message_id for r in good)


@pytest.mark.parametrize("n", [1])
def test_single_event_error_is_reported(engine: Engine, n: int) -> None:
    store = EventStore(engine)
    poison = bad_records()[0]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)
            with pytest.raises(StoreRejected):
                await store.append([poison] * n)
            await store.close()

    trio.run(main)


def test_append_isolating_keeps_order_and_names_each_failure(engine: Engine) -> None:
    """The ingest workers' append: an event the database refuses fails alone, an unstorable
    one is rejected before the insert, the rest is stored in the order given."""
    good = [make_record(i) for i in range(5)]
    refused = make_record(60)
    _refuse_in_database(engine, refused.message_id)
    unstorable = bad_records()[0]
    batch = [good[3], good[0], refused, unstorable, good[4], good[1], good[0]]
    result, errors = append_isolating(engine, batch, received_at=5)
    assert list(errors) == [refused.message_id] and "refused" in errors[refused.message_id]
    assert result.rejected == ((unstorable.message_id, record_problem(unstorable)),)
    assert [m for _, m in result.inserted] == [r.message_id for r in (good[3], good[0],
                                                                     good[4], good[1])]
    assert result.duplicates == (good[0].message_id,)
    with engine.connect() as conn:
        assert [e.message_id for e in read_channel(conn, "general")] == [
            m for _, m in result.inserted]

    again, errors = append_isolating(engine, [good[2], good[3]], received_at=6)
    assert errors == {} and [m for _, m in again.inserted] == [good[2].message_id]
    assert again.duplicates == (good[3].message_id,)
