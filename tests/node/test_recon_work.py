"""The Recon worker thread (node.replication.recon_work): session work off the trio thread,
one at a time, and the trio thread's inserts never wait for it nor get lost."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from node.replication.recon_work import KeyStoreWork
from storage import SqlKeyReader, append_events, make_engine, upgrade
from sync.recon import MemoryKeyStore, ReconConfig, ReconSession, SummaryKeyStore, insert_keys
from sync.replication import Action, SendFrame
from sync.transfer import ReconExchange
from tests.storage.conftest import make_record
from tests.sync.recon.helpers import FULL, CommittedFirst
from tests.sync.recon.test_reads import GuardedSource


def _store() -> tuple[SummaryKeyStore, CommittedFirst]:
    # Like the events table: a key is in the log (committed) before the store hears of it.
    return SummaryKeyStore(load=16, max_buckets=64, cache_keys=64), CommittedFirst()


def test_inserts_while_a_worker_holds_the_store_are_queued_then_applied() -> None:
    store, source = _store()
    work = KeyStoreWork(store, source)
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
    store, source = _store()
    work = KeyStoreWork(store, source)
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
    work = KeyStoreWork(store, source)
    for i in range(1, 20):
        source.model.insert(bytes([i]))
        work.insert_many([bytes([i])])
    assert len(store) == 19


class _GuardedSql(SqlKeyReader):
    """The events table as the key source, failing the test when read inside a step."""

    in_step = False
    reads = 0

    def present(self, keys: Sequence[bytes]) -> set[bytes]:
        assert not self.in_step, "SQL read inside a Recon step"
        self.reads += 1
        return super().present(keys)

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]:
        assert not self.in_step, "SQL read inside a Recon step"
        self.reads += 1
        return super().keys(lo, hi, limit)


def _sql_side(tmp_path: Path, name: str, indexes: list[int], budget: int | None) -> tuple[
        ReconExchange, KeyStoreWork, _GuardedSql, set[bytes]]:
    engine = make_engine(f"sqlite:///{tmp_path / name}.db")
    upgrade(engine)
    records = [make_record(i, sender=f"p{i % 5}") for i in indexes]
    with engine.begin() as conn:
        append_events(conn, records, received_at=0)
    source = _GuardedSql(engine)
    store = SummaryKeyStore(load=16, max_buckets=64, cache_keys=32)
    if budget is not None:
        store.answer_keys = budget
    work = KeyStoreWork(store, source)  # answers the store's reads from the table
    work.insert_many(r.recon_key for r in records)
    config = ReconConfig(key_list_threshold=8)
    make = ReconSession.initiator if name == "a" else ReconSession.responder
    exchange = ReconExchange(make(store, FULL, config), max_missing_keys=10_000)
    return exchange, work, source, {r.recon_key for r in records}


def _reconcile_sql(tmp_path: Path, budget: int | None = None
                   ) -> tuple[KeyStoreWork, KeyStoreWork]:
    """Two exchanges over real SQLite event tables, each step run by the Recon worker (which
    makes the reads a step asks for, between steps); they must reconcile, and no step reads
    SQL (``budget``: the keys the answers of a step may hold)."""
    a, work_a, src_a, keys_a = _sql_side(tmp_path, "a", [*range(300), *range(1000, 1030)],
                                         budget)
    b, work_b, src_b, keys_b = _sql_side(tmp_path, "b", [*range(300), *range(2000, 2020)],
                                         budget)

    def stepping(source: _GuardedSql, step: Callable[[], list[Action]]) -> list[Action]:
        source.in_step = True
        try:
            return step()
        finally:
            source.in_step = False

    for exchange, source in ((a, src_a), (b, src_b)):
        # The exchange's input of reads lets the waiting step go on: guarded like the others.
        exchange.keys_read = functools.partial(  # type: ignore[method-assign]
            lambda answer, source, got: stepping(source, functools.partial(answer, got)),
            exchange.keys_read, source)

    async def main() -> None:
        actions = await work_a.step(functools.partial(stepping, src_a, a.start), a.keys_read)
        sides = [(b, work_b, src_b), (a, work_a, src_a)]
        turn = 0
        while frames := [x.frame for x in actions if isinstance(x, SendFrame)]:
            exchange, work, source = sides[turn]
            actions = await work.step(functools.partial(
                stepping, source, functools.partial(exchange.receive, frames[0], 0.0)),
                exchange.keys_read)
            turn ^= 1

    trio.run(main)
    assert a.done and b.done
    assert set(a.missing) == keys_b - keys_a
    assert set(b.missing) == keys_a - keys_b
    return work_a, work_b


def test_no_sql_inside_a_step_on_the_events_table(tmp_path: Path) -> None:
    """Every read the sessions need is made by the driver between steps."""
    work_a, work_b = _reconcile_sql(tmp_path)
    assert work_a.answered_reads > 0 and work_b.answered_reads > 0
    assert work_a.keys.answers_dropped == work_b.keys.answers_dropped == 0


def test_a_step_over_the_answer_budget_still_only_asks(tmp_path: Path) -> None:
    """Answers are bounded (a hostile message may name ranges all over a large log): past the
    bound the answers held are dropped, what the step computed from them is kept, and the
    step settles on requests alone: no SQL inside it either."""
    work_a, work_b = _reconcile_sql(tmp_path, budget=0)
    assert work_a.keys.answers_dropped > 0 and work_b.keys.answers_dropped > 0


keys_st = st.lists(st.binary(min_size=1, max_size=3), max_size=150, unique=True)


def _memory_exchange(keys: list[bytes], initiator: bool, config: ReconConfig) -> ReconExchange:
    # The simulator's kind (sync/sim/replication.py): a store in memory, which never asks.
    store = MemoryKeyStore.from_sorted(sorted(keys))
    make = ReconSession.initiator if initiator else ReconSession.responder
    return ReconExchange(make(store, FULL, config), max_missing_keys=10_000)


def _shuttle(a: ReconExchange, b: ReconExchange,
             step: Callable[[ReconExchange, list[Action]], list[Action]]) -> None:
    actions = step(a, a.start())
    turn = (b, a)
    n = 0
    while frames := [x.frame for x in actions if isinstance(x, SendFrame)]:
        side = turn[n % 2]
        actions = step(side, side.receive(frames[0], 0.0))
        n += 1
    assert a.done and b.done


@settings(max_examples=40, deadline=None)
@given(ours=keys_st, theirs=keys_st, threshold=st.integers(2, 12),
       cache_keys=st.sampled_from([0, 8, 1000]))
def test_the_worker_carries_out_reads_and_exchanges_agree_with_the_simulators(
        ours: list[bytes], theirs: list[bytes], threshold: int, cache_keys: int) -> None:
    """The node's exchanges over asking key stores, each ``ReadKeys`` carried out by the Recon
    worker and fed back as ``KeysRead``, find exactly what the simulator's exchanges over
    stores in memory find: the same core (``ReconExchange``), the reads as actions and inputs,
    on a fixed clock (``now`` 0)."""
    config = ReconConfig(key_list_threshold=threshold)
    works: dict[int, KeyStoreWork] = {}
    asking = []
    for keys, initiator in ((ours, True), (theirs, False)):
        source = GuardedSource([])
        store = SummaryKeyStore(load=4, max_buckets=64, cache_keys=cache_keys)
        insert_keys(store, [k for k in keys if source.add(k)], source)
        make = ReconSession.initiator if initiator else ReconSession.responder
        exchange = ReconExchange(make(store, FULL, config), max_missing_keys=10_000)
        works[id(exchange)] = KeyStoreWork(store, source)
        asking.append(exchange)
    _shuttle(asking[0], asking[1], lambda ex, acts: works[id(ex)]._answering(acts, ex.keys_read))
    memory = [_memory_exchange(ours, True, config), _memory_exchange(theirs, False, config)]
    _shuttle(memory[0], memory[1], lambda _ex, acts: acts)
    assert set(asking[0].missing) == set(memory[0].missing) == set(theirs) - set(ours)
    assert set(asking[1].missing) == set(memory[1].missing) == set(ours) - set(theirs)
    if (ours or theirs) and not cache_keys:  # with no cache every step that reads asks
        assert sum(w.answered_reads for w in works.values()) > 0
