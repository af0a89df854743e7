"""The ingest worker pool (node.replication.ingest) with real worker processes: what it
returns matches a decode in the daemon, bad events are reported one by one, a crashed worker
is restarted (and a crashing one stops the daemon), and no worker outlives its daemon, even
one killed by SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from node.metrics import Metrics
from node.replication.ingest import IngestPool, IngestUnavailable, IngestWorkerFailed
from sync.identity import peer_id_of
from sync.ingest import IngestSpec, VerifiedBatch
from sync.recon.sha256a import lanes_of
from sync.sds import SdsChannel, decode_event, sds_pb2
from sync.stored_event import record_of_event
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
    while len(_worker_pids(pool)) < pool.size:
        await trio.sleep(0.05)


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
        pool = IngestPool(SPEC, 2, Metrics())
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
        pool = IngestPool(SPEC, 1, metrics)
        failed = False
        try:
            async with trio.open_nursery() as nursery:
                await _started(pool, nursery)
                first = _worker_pids(pool)[0]
                os.kill(first, signal.SIGKILL)
                with pytest.raises(IngestUnavailable):
                    # Either the dead worker's pipe or "none running" until it is back.
                    for _ in range(100):
                        await pool.verify(wires)
                        await trio.sleep(0.01)
                while not _worker_pids(pool) or _worker_pids(pool)[0] == first:
                    await trio.sleep(0.05)
                _check(await pool.verify(wires), wires, set())
                assert metrics.value("ingest_worker_restarts_total") == 1
                # Dying again and again: the pool gives up and raises out of run().
                while True:
                    for pid in _worker_pids(pool):
                        os.kill(pid, signal.SIGKILL)
                    await trio.sleep(0.05)
        except* IngestWorkerFailed:
            failed = True
        assert failed
        assert metrics.value("ingest_worker_restarts_total") == 4

    trio.run(main)


DAEMON = """
import sys, trio
from node.replication.ingest import IngestPool
from node.metrics import Metrics
from sync.ingest import IngestSpec

async def main():
    pool = IngestPool(IngestSpec(1), 2, Metrics())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.run)
        while len([w for w in pool._workers if w is not None]) < 2:
            await trio.sleep(0.05)
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
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids), "an ingest worker outlived its daemon"
    finally:
        daemon.kill()


@pytest.mark.slow
def test_idle_workers_stay_up() -> None:
    """trio starts processes from its worker threads, which end after 10 idle seconds: the
    workers must not be tied to that thread (a PR_SET_PDEATHSIG once killed them then)."""
    wires = _wires(100)

    async def main() -> None:
        metrics = Metrics()
        pool = IngestPool(SPEC, 2, metrics)
        async with trio.open_nursery() as nursery:
            await _started(pool, nursery)
            pids = _worker_pids(pool)
            await trio.sleep(12)
            assert _worker_pids(pool) == pids
            _check(await pool.verify(wires), wires, set())
            assert metrics.value("ingest_worker_restarts_total") == 0
            nursery.cancel_scope.cancel()

    trio.run(main)
