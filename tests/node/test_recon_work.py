"""The Recon worker thread (node.replication.recon_work): session work off the trio thread,
one at a time, and the trio thread's inserts never wait for it nor get lost."""

from __future__ import annotations

import threading

import trio

from node.replication.recon_work import KeyStoreWork
from sync.recon import SummaryKeyStore
from tests.sync.recon.test_summary import CommittedFirst


def _store() -> tuple[SummaryKeyStore, CommittedFirst]:
    # Like the events table: a key is in the source (committed) before the store hears of it.
    source = CommittedFirst()
    return SummaryKeyStore(source, load=16, max_buckets=64, cache_keys=64), source


def test_inserts_while_a_worker_holds_the_store_are_queued_then_applied() -> None:
    store, source = _store()
    work = KeyStoreWork(store)
    started, release = threading.Event(), threading.Event()
    keys = [bytes([i]) * 4 for i in range(1, 50)]
    seen_in_worker: list[int] = []

    def slow() -> int:
        started.set()
        release.wait(10)
        seen_in_worker.append(len(store))
        return len(store)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(work.run, slow)
            await trio.to_thread.run_sync(started.wait, 10)
            for key in keys:  # the commit path: must not block while the worker runs
                source.model.insert(key)
                with trio.fail_after(1):
                    work.insert_many([key])
            # Queued, not applied: the worker holds the store.
            assert len(store) == 0
            with work.try_locked() as free:
                assert not free
            release.set()
        with work.try_locked() as free:
            assert free
        assert len(store) == len(keys)

    trio.run(main)
    assert seen_in_worker == [0]


def test_work_runs_one_at_a_time_in_a_worker_thread() -> None:
    store, _ = _store()
    work = KeyStoreWork(store)
    running = 0
    most = 0
    threads: set[int] = set()
    lock = threading.Lock()

    def step() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        threads.add(threading.get_ident())
        threading.Event().wait(0.02)
        with lock:
            running -= 1

    async def main() -> None:
        main_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(work.run, step)
        assert main_thread not in threads

    trio.run(main)
    assert most == 1


def test_inserts_apply_at_once_when_the_store_is_free() -> None:
    store, source = _store()
    work = KeyStoreWork(store)
    for i in range(1, 20):
        source.model.insert(bytes([i]))
        work.insert_many([bytes([i])])
    assert len(store) == 19
