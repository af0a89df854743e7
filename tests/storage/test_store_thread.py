"""The store's writer thread (node/store/thread.py): every local commit of ``EventStore`` runs
in one long-lived thread fed by a queue, and the contract the thread pool gave holds: a caller
is answered only after its transaction committed (a fresh connection sees its rows), commits
run in queue order (seqs follow the order of the appends), a commit once started is finished
and reported even when its waiter is cancelled, an error comes back to its caller and the
thread goes on, and the thread ends with the writer.
"""

from __future__ import annotations

import threading
import time

import pytest
import trio
from sqlalchemy import Connection, Engine

from node.store.events import EventStore
from node.store.thread import CommitThread
from storage import seqs_of_message_ids
from tests.storage.conftest import make_record
from tests.storage.store_reports import Reports

THREAD = "syncnode-store-writer"


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def test_answered_after_commit_in_queue_order_in_one_thread(engine: Engine) -> None:
    threads: set[int] = set()

    def note_thread(_conn: Connection) -> None:
        threads.add(threading.get_ident())

    async def main() -> None:
        store = EventStore(engine, max_delay_ms=1, reports=True)
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)
            answers: list[tuple[int, dict[str, int]]] = []

            async def publish(i: int) -> None:
                record = make_record(i)
                result = await store.append([record], also=note_thread)
                # Durable when answered: a fresh connection sees the row, with the seq given.
                with engine.connect() as conn:
                    seen = seqs_of_message_ids(conn, [record.message_id])
                assert seen == {record.message_id: result.inserted[0][0]}
                answers.append((i, seen))

            async with trio.open_nursery() as publishers:
                for i in range(40):
                    publishers.start_soon(publish, i)
                    if i % 7 == 6:
                        await trio.sleep(0.002)  # several batches, not one
            await store.close()
        assert len(answers) == 40 and store.batches > 1
        with engine.connect() as conn:
            seqs = seqs_of_message_ids(conn, [make_record(i).message_id for i in range(40)])
        # The log's order is the queue's (trio runs the publishing tasks in any order).
        queued = Reports(store).take().queued
        assert [seqs[mid] for mid in queued] == sorted(seqs.values())

    trio.run(main)
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_the_thread_ends_with_the_writer(engine: Engine) -> None:
    async def main() -> None:
        store = EventStore(engine, max_delay_ms=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)
            await store.append([make_record(0)])
            assert len(_writer_threads()) == 1
            await store.close()
        deadline = time.monotonic() + 30
        while _writer_threads() and time.monotonic() < deadline:
            await trio.sleep(0.01)
        assert _writer_threads() == []

    trio.run(main)


def test_a_started_commit_is_finished_and_reported_through_a_cancel() -> None:
    thread = CommitThread()
    release = threading.Event()
    ran: list[str] = []

    def slow() -> str:
        release.wait(30)
        ran.append("done")
        return "committed"

    async def main() -> None:
        got: list[str] = []
        with trio.CancelScope() as scope:
            trio.lowlevel.current_trio_token().run_sync_soon(scope.cancel)
            threading.Timer(0.2, release.set).start()
            got.append(await thread.run(slow))
        assert got == ["committed"] and ran == ["done"]
        thread.stop()

    trio.run(main)


def test_an_error_comes_back_to_its_caller_and_the_thread_goes_on() -> None:
    thread = CommitThread()

    def fail() -> None:
        raise ValueError("disk full")

    async def main() -> None:
        with pytest.raises(ValueError, match="disk full"):
            await thread.run(fail)
        assert await thread.run(lambda: 7) == 7
        thread.stop()

    trio.run(main)
