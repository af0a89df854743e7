"""The event store handing fetched batches to a remote writer (an ingest worker) and keeping
its view exact when that writer dies (SQLite and PostgreSQL).

The writers here run in the test's process (a thread doing what the worker does,
``storage.append_isolating``); the worker processes themselves are tested in
tests/node/test_ingest.py. A writer "dying" is an exception raised before or after its commit.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio
from sqlalchemy import Engine

from node.store.events import EventStore
from storage import AppendResult, EventRecord, append_isolating, read_channel
from tests.storage.conftest import make_record
from tests.storage.store_reports import Reports


class _Writer:
    def __init__(self, engine: Engine, die: str | None = None) -> None:
        self.engine = engine
        self.die = die
        self.calls: list[list[str]] = []

    async def __call__(self, records: Sequence[EventRecord], received_at: int
                       ) -> tuple[AppendResult, dict[str, str]]:
        self.calls.append([r.message_id for r in records])
        if self.die == "before":
            raise OSError("worker died before its commit")
        answer = await trio.to_thread.run_sync(append_isolating, self.engine, records,
                                               received_at)
        if self.die == "after":
            raise OSError("worker died after its commit")
        return answer


def _run(store: EventStore, body: object) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)
            body(store)  # type: ignore[operator]
            await trio.sleep(0.3)
            await store.close()

    trio.run(main)


def test_fetched_batches_go_to_the_remote_writer_in_queue_order(engine: Engine) -> None:
    writer = _Writer(engine)
    committed: list[str] = []
    store = EventStore(engine, max_batch=64, max_delay_ms=50, remote_writer=writer, observers=[
        lambda result, _: committed.extend(m for _, m in result.inserted)])
    local_a, local_b = [make_record(i) for i in range(3)], [make_record(i) for i in range(3, 5)]
    fetched_1 = [make_record(i) for i in range(10, 14)]
    fetched_2 = [make_record(i) for i in range(14, 16)] + [make_record(10)]

    def body(s: EventStore) -> None:
        s.submit(local_a)
        s.submit_fetched(fetched_1)
        s.submit_fetched(fetched_2[:1])
        s.submit(local_b)
        s.submit_fetched(fetched_2)

    _run(store, body)
    order = [r.message_id for r in [*local_a, *fetched_1, *fetched_2[:1], *local_b,
                                    *fetched_2[1:2]]]
    with engine.connect() as conn:
        assert [e.message_id for e in read_channel(conn, "general")] == order
    # Consecutive fetched items are one remote append; local ones never reach the writer.
    assert writer.calls == [[r.message_id for r in [*fetched_1, *fetched_2[:1]]],
                            [r.message_id for r in fetched_2]]
    assert committed == order
    assert store.committed_events == len(order) and store.remote_settled == 0
    assert store.remote_appends == 2


def test_a_writer_that_died_after_its_commit_is_settled_from_the_log(engine: Engine) -> None:
    stored_before = [make_record(i) for i in range(2)]
    writer = _Writer(engine, die="after")
    committed: list[tuple[int, str]] = []
    store = EventStore(engine, max_batch=64, max_delay_ms=50, remote_writer=writer, reports=True,
                       observers=[lambda result, _: committed.extend(result.inserted)])
    fetched = [make_record(i) for i in range(6)]

    def body(s: EventStore) -> None:
        s.submit(stored_before)
        s.submit_fetched(fetched)

    _run(store, body)
    with engine.connect() as conn:
        rows = {e.message_id: e.seq for e in read_channel(conn, "general")}
    assert len(rows) == 6 and Reports(store).take().failed == []
    # Every stored row reported once, with its seq: the two local ones, then the four new.
    assert sorted(committed) == sorted((seq, mid) for mid, seq in rows.items())
    assert store.remote_settled == 1 and store.duplicate_events == 2


def test_a_writer_that_died_before_its_commit_fails_its_events(engine: Engine) -> None:
    store = EventStore(engine, max_batch=64, max_delay_ms=50,
                       remote_writer=_Writer(engine, die="before"), reports=True)
    fetched = [make_record(i) for i in range(4)]
    errors: list[BaseException] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)
            store.submit_fetched(fetched)
            try:
                await store.append([make_record(9)])
            except Exception as exc:  # not expected: local appends are the daemon's own
                errors.append(exc)
            await store.close()

    trio.run(main)
    assert Reports(store).take().failed == [r.message_id for r in fetched] and errors == []
    assert store.failed_events == 4 and store.committed_events == 1
    with engine.connect() as conn:
        assert [e.message_id for e in read_channel(conn, "general")] == [make_record(9).message_id]
