"""The ingest worker pool (node.replication.ingest) with real worker processes: what it
returns matches a decode in the daemon, bad events are reported one by one, a crashed worker
is restarted (and a crashing one stops the daemon), and no worker outlives its daemon, even
one killed by SIGKILL."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from trio._core import _thread_cache

from node.api.node_metrics import register_store_metrics
from node.clock import SystemClock
from node.replication.ingest import IngestPool, IngestUnavailable, IngestWorkerFailed
from node.store.events import EventStore
from node.store.worker import AppendRequest
from node.telemetry.metrics import Metrics
from storage import EventRecord, make_engine, read_channel, upgrade
from sync.identity import peer_id_of
from sync.ingest import IngestSpec, VerifiedBatch
from sync.recon.sha256a import lanes_of
from sync.sds import SdsChannel, decode_event, sds_pb2
from sync.stored_event import record_of_event
from tests.harness.cluster import until, wait_for
from tests.pg import reset_postgres
from tests.storage.store_reports import Reports
from tests.sync.sds.helpers import CHANNEL, T0, key

SPEC = IngestSpec(network_id=1)
ROOT = Path(__file__).resolve().parents[2]


def _wires(count: int) -> list[bytes]:
    k = key(3)
    ch = SdsChannel(CHANNEL, peer_id_of(k), k, None, random.Random(1), T0)
    return [ch.send(f"event {n}".encode(), T0 + n) for n in range(count)]


def _worker_pids(pool: IngestPool) -> list[int]:
    return [w.proc.pid for w in pool._workers if w is not None]


async def _started(pool: IngestPool, nursery: trio.Nursery) -> None:
    nursery.start_soon(pool.run)
    await until(lambda: len(_worker_pids(pool)) >= pool.size, 60, "the workers did not start")


def _check(batch: VerifiedBatch, wires: list[bytes], bad: set[int]) -> None:
    assert len(batch) == len(wires)
    assert set(batch.rejected) == bad
    for i, wire in enumerate(wires):
        if i in bad:
            continue
        event = decode_event(wire)
        fields = record_of_event(1, event)
        assert batch.message_ids[i] == event.message_id
        assert batch.senders[i] == event.sender_id
        assert batch.lamports[i] == event.lamport
        assert batch.keys[i] == fields.recon_key
        assert batch.lanes[i] == lanes_of(fields.recon_key)
        assert batch.histories[i] == event.history_ids
        assert batch.has_content[i]


def test_workers_verify_and_report_each_bad_event() -> None:
    wires = _wires(300)
    msg = sds_pb2.Message()
    msg.ParseFromString(wires[7])
    msg.signature = bytes([msg.signature[0] ^ 1]) + msg.signature[1:]
    wires[7] = msg.SerializeToString()
    wires[200] = b"\x08garbage"

    async def main() -> None:
        pool = IngestPool(SPEC, 2, Metrics(), SystemClock())
        async with trio.open_nursery() as nursery:
            await _started(pool, nursery)
            batch = await pool.verify(wires)
            _check(batch, wires, {7, 200})
            assert batch.rejected[7] == "bad signature"
            # Small batches go to one worker; an empty one works too.
            _check(await pool.verify(wires[:10]), wires[:10], {7})
            assert len(await pool.verify([])) == 0
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_crashed_worker_is_restarted_and_a_crashing_one_stops_the_daemon() -> None:
    wires = _wires(200)

    async def main() -> None:
        metrics = Metrics()
        pool = IngestPool(SPEC, 1, metrics, SystemClock())
        failed = False
        try:
            async with trio.open_nursery() as nursery:
                await _started(pool, nursery)
                first = _worker_pids(pool)[0]
                os.kill(first, signal.SIGKILL)
                with pytest.raises(IngestUnavailable), trio.fail_after(30):
                    # Either the dead worker's pipe or "none running" until it is back.
                    while True:
                        await pool.verify(wires)
                await until(lambda: _worker_pids(pool) and _worker_pids(pool)[0] != first, 60,
                            "the killed worker was not replaced")
                _check(await pool.verify(wires), wires, set())
                assert metrics.value("ingest_worker_restarts_total") == 1
                # Dying again and again: the pool gives up and raises out of run().
                while True:
                    pids = _worker_pids(pool)
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
                    await until(lambda pids=pids: _worker_pids(pool) not in ([], pids), 60,
                                "the killed worker was not replaced")
        except* IngestWorkerFailed:
            failed = True
        assert failed
        assert metrics.value("ingest_worker_restarts_total") == 4

    trio.run(main)


DAEMON = """
import sys, trio
from node.clock import SystemClock
from node.replication.ingest import IngestPool
from node.telemetry.metrics import Metrics
from sync.ingest import IngestSpec
from tests.harness.cluster import until

async def main():
    pool = IngestPool(IngestSpec(1), 2, Metrics(), SystemClock())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.run)
        await until(lambda: all(w is not None for w in pool._workers), 60, "workers not up")
        print(" ".join(str(w.proc.pid) for w in pool._workers), flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_workers_die_with_a_killed_daemon() -> None:
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert daemon.stdout is not None
        pids = [int(p) for p in daemon.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        daemon.kill()
        daemon.wait()
        wait_for(lambda: not any(_alive(p) for p in pids), 10,
                 "an ingest worker outlived its daemon")
    finally:
        daemon.kill()


def test_idle_workers_stay_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """trio starts processes from its worker threads, which end after 10 idle seconds: the
    workers must not be tied to that thread (a PR_SET_PDEATHSIG once killed them then). Here
    the threads idle out after a tenth of a second, and the test waits until they have."""
    wires = _wires(100)
    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.1)

    async def main() -> None:
        metrics = Metrics()
        pool = IngestPool(SPEC, 2, metrics, SystemClock())
        async with trio.open_nursery() as nursery:
            await _started(pool, nursery)
            pids = _worker_pids(pool)
            # The threads that started the workers (idle now: their jobs are done).
            starters = [w._thread for w in _thread_cache.THREAD_CACHE._idle_workers]
            assert starters
            await until(lambda: not any(t.is_alive() for t in starters), 30,
                        "trio's idle worker threads did not end")
            assert _worker_pids(pool) == pids
            _check(await pool.verify(wires), wires, set())
            assert metrics.value("ingest_worker_restarts_total") == 0
            nursery.cancel_scope.cancel()

    trio.run(main)


def _db_urls(tmp_path: Path) -> list[str]:
    urls = [f"sqlite:///{tmp_path / 'node.db'}"]
    if os.environ.get("SYNCNODE_TEST_PG"):
        reset_postgres(os.environ["SYNCNODE_TEST_PG"])
        urls.append(os.environ["SYNCNODE_TEST_PG"])
    return urls


def _append_request(url: str, batch: VerifiedBatch, wires: list[bytes],
                    positions: list[int]) -> AppendRequest:
    return AppendRequest(
        url, "FULL", 7, [batch.keys[i] for i in positions],
        [batch.message_ids[i] for i in positions], [batch.channels[i] for i in positions],
        [batch.senders[i] for i in positions], [batch.lamports[i] for i in positions],
        [batch.canonical.get(i, wires[i]) for i in positions],
        [batch.lanes[i] for i in positions])


def test_a_worker_appends_what_it_verified_in_the_order_given(tmp_path: Path) -> None:
    """The ingest worker as writer: rows go to the database in the order the daemon sends
    them, committed before the answer; duplicates and unstorable rows are named, not stored."""
    wires = _wires(120)
    for url in _db_urls(tmp_path):
        engine = make_engine(url)
        upgrade(engine)

        async def main(url: str = url) -> None:
            pool = IngestPool(SPEC, 2, Metrics(), SystemClock())
            async with trio.open_nursery() as nursery:
                await _started(pool, nursery)
                batch = await pool.verify(wires)
                order = list(range(100))
                random.Random(3).shuffle(order)
                result, errors = await pool.append(_append_request(url, batch, wires, order))
                assert errors == {} and result.duplicates == ()
                assert [m for _, m in result.inserted] == [batch.message_ids[i] for i in order]
                # Again with 10 stored ones, 20 new ones and one the database cannot hold.
                bad = dataclasses.replace(_append_request(url, batch, wires, [110]),
                                          lamports=[-1])
                more = _append_request(url, batch, wires, list(range(90, 110)))
                joined = AppendRequest(url, "FULL", 8, *(
                    list(getattr(more, f)) + list(getattr(bad, f))
                    for f in ("keys", "message_ids", "channels", "senders", "lamports",
                              "wires", "lanes")))
                result, errors = await pool.append(joined)
                assert errors == {}
                assert [m for _, m in result.inserted] == batch.message_ids[100:110]
                assert sorted(result.duplicates) == sorted(batch.message_ids[90:100])
                assert [m for m, _ in result.rejected] == [batch.message_ids[110]]
                nursery.cancel_scope.cancel()

        trio.run(main)
        with engine.connect() as conn:
            stored = read_channel(conn, CHANNEL, 0, 1000)
        engine.dispose()
        assert len(stored) == 110
        # The canonical wires are stored, and each is the event of its row.
        assert {decode_event(e.wire).message_id for e in stored} == {
            decode_event(w).message_id for w in wires[:110]}
        assert all(decode_event(e.wire).message_id == e.message_id for e in stored)
        assert all(e.received_at in (7, 8) for e in stored)


def test_a_worker_killed_while_appending_leaves_the_store_view_exact(tmp_path: Path) -> None:
    """SIGKILL the writing worker at some point of a large append (before, during or after
    its COMMIT: the test cannot choose, and need not): whatever the database holds is exactly
    what the store reported committed, the rest is reported failed, nothing twice."""
    url = f"sqlite:///{tmp_path / 'node.db'}"
    engine = make_engine(url)
    upgrade(engine)
    records = [EventRecord(hashlib.sha256(b"k%d" % i).digest() * 2, f"{i:064x}", CHANNEL,
                           "sender", i, b"wire-%d" % i) for i in range(50_000)]
    metrics = Metrics()
    pool = IngestPool(SPEC, 1, metrics, SystemClock())
    store = EventStore(engine, max_batch=100_000, max_delay_ms=5,
                       remote_writer=pool.remote_writer(url, "NORMAL"), reports=True)
    reports = Reports(store)
    register_store_metrics(metrics, store)
    wal = tmp_path / "node.db-wal"

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await _started(pool, nursery)
            await nursery.start(store.run_writer)
            wal_before = wal.stat().st_size if wal.exists() else 0
            store.submit_fetched(records)
            worker = pool._workers[0]
            assert worker is not None
            # The request is on its way: the answer is not.
            await until(lambda: worker.pending, 30, "no request pending", pause_max=0.01)
            # Killed once it writes (its transaction's pages reach the WAL), or later.
            await until(lambda: wal.exists() and wal.stat().st_size > wal_before, 30,
                        "the worker did not write", pause_max=0.01)
            os.kill(worker.proc.pid, signal.SIGKILL)
            await until(lambda: len((r := reports.take()).committed) + len(r.failed)
                        >= len(records), 60,
                        "not every record was committed or failed")
            assert metrics.value("ingest_worker_restarts_total") == 1
            nursery.cancel_scope.cancel()

    trio.run(main)
    with engine.connect() as conn:
        stored = [e.message_id for e in read_channel(conn, CHANNEL, 0, 100_000)]
    engine.dispose()
    assert sorted(reports.committed) == sorted(stored)
    assert sorted(reports.committed + reports.failed) == sorted(r.message_id for r in records)
    assert metrics.value("store_remote_settled_total") == 1
    assert metrics.value("store_remote_appends_total") == 0
