"""Ingest worker processes: fetched events are decoded and verified outside the daemon's GIL.

A catch-up is bound by per-event CPU: protobuf decode, id digest, Ed25519 check, Recon key and
lanes cost ~70 us an event, and in the daemon that work competed for one GIL with the event
loop (libp2p, SDS, the store), so two cores were never both busy (docs/architecture.md
"Ingest"). ``IngestPool`` keeps ``recon.ingest_workers`` processes (``ingest_worker``); each
batch of wire bytes is split across them and comes back as one ``VerifiedBatch`` of
compact columns, so the daemon's share of an event is a few dictionary operations and its
row in the store's ``executemany``.

The workers are stateless, so a crashed one is simply restarted (the batches it held fail
with ``IngestUnavailable``: their Recon session ends and its keys are fetched again); more
than ``MAX_RESTARTS`` deaths within ``RESTART_WINDOW_S`` raise ``IngestWorkerFailed`` out of
``run``: a worker that dies on every batch must be seen, not retried quietly. The daemon's
supervisor (``node.supervisor``) logs it, counts it in ``node_task_failures_total`` and starts
the pool again after a back-off that grows to a minute; the rest of the node keeps serving.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import struct
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from node.replication.clock import Clock
from node.store.commits import RemoteWriter
from node.store.worker import AppendRequest
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import AppendResult, EventRecord
from sync.ingest import IngestSpec, VerifiedBatch

__all__ = ["IngestPool", "IngestUnavailable", "IngestWorkerFailed"]

log = logging.getLogger("syncnode.ingest")
_LEN = struct.Struct(">I")
MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0
# Batches smaller than this go to one worker: splitting would cost more than it saves.
MIN_SPLIT = 64
START_TIMEOUT_S = 30.0


class IngestUnavailable(Exception):
    """No ingest worker could verify the batch (one crashed or the node is stopping)."""


class IngestWorkerFailed(RuntimeError):
    """Ingest workers keep dying: the daemon stops instead of limping on."""


@dataclass
class _Slot:
    done: trio.Event = field(default_factory=trio.Event)
    result: object = None
    error: BaseException | None = None


@dataclass
class _Worker:
    proc: trio.Process
    pending: deque[tuple[int, _Slot]] = field(default_factory=deque)
    send_lock: trio.Lock = field(default_factory=trio.Lock)
    alive: bool = True


class IngestPool:
    def __init__(self, spec: IngestSpec, workers: int, metrics: Metrics, clock: Clock) -> None:
        if workers < 1:
            raise ValueError("an ingest pool needs at least one worker")
        self.clock = clock
        self.spec = spec
        self.size = workers
        self.metrics = metrics
        self._workers: list[_Worker | None] = [None] * workers
        self._ids = itertools.count()
        self._ready = trio.Event()
        self._next = 0
        metrics.describe("ingest_worker_restarts_total", "counter",
                         "Ingest worker processes that died and were restarted")
        metrics.inc("ingest_worker_restarts_total", 0)
        metrics.gauge_fn("ingest_workers", lambda: float(len(self._alive())),
                         "Ingest worker processes running (recon.ingest_workers)")

    def _alive(self) -> list[_Worker]:
        return [w for w in self._workers if w is not None and w.alive]

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(self.size):
                nursery.start_soon(self._supervise, i)

    async def _supervise(self, index: int) -> None:
        deaths: deque[float] = deque()
        while True:
            code = await self._run_one(index)
            now = self.clock.now()
            deaths.append(now)
            while deaths and deaths[0] < now - RESTART_WINDOW_S:
                deaths.popleft()
            self.metrics.inc("ingest_worker_restarts_total")
            log.error("ingest worker died", extra=kv(worker=index, exit_code=code,
                                                     recent_deaths=len(deaths)))
            if len(deaths) > MAX_RESTARTS:
                raise IngestWorkerFailed(
                    f"ingest worker {index} died {len(deaths)} times within "
                    f"{RESTART_WINDOW_S:.0f} s (last exit code {code})")
            await trio.sleep(0.2 * len(deaths))

    async def _run_one(self, index: int) -> int | None:
        """Start worker ``index`` and serve its answers until it exits; its exit code."""
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "node.store.worker", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        worker = _Worker(proc)
        try:
            await self._send(worker, pickle.dumps(self.spec, protocol=pickle.HIGHEST_PROTOCOL))
            self._workers[index] = worker
            self._ready.set()
            await self._read(worker)
        finally:
            worker.alive = False
            self._workers[index] = None
            while worker.pending:
                _, slot = worker.pending.popleft()
                slot.error = IngestUnavailable("ingest worker exited")
                slot.done.set()
            with trio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.kill()
                await proc.wait()
        return proc.returncode

    async def _read(self, worker: _Worker) -> None:
        assert worker.proc.stdout is not None
        buffer = bytearray()
        while True:
            data = await worker.proc.stdout.receive_some(1 << 20)
            if not data:
                return
            buffer += data
            while len(buffer) >= _LEN.size:
                (size,) = _LEN.unpack_from(buffer)
                if len(buffer) < _LEN.size + size:
                    break
                answer_id, batch = pickle.loads(buffer[_LEN.size : _LEN.size + size])
                del buffer[: _LEN.size + size]
                expected, slot = worker.pending.popleft()
                if answer_id != expected:  # cannot happen: one pipe, answered in order
                    raise IngestWorkerFailed("ingest worker answered out of order")
                slot.result = batch
                slot.done.set()

    async def _send(self, worker: _Worker, body: bytes) -> None:
        assert worker.proc.stdin is not None
        async with worker.send_lock:
            # A frame cut by a cancellation would corrupt the pipe for every later batch.
            with trio.CancelScope(shield=True):
                try:
                    await worker.proc.stdin.send_all(_LEN.pack(len(body)) + body)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    raise IngestUnavailable("ingest worker's input is closed") from exc

    async def _submit(self, worker: _Worker, kind: str, body: object) -> _Slot:
        request_id = next(self._ids)
        slot = _Slot()
        worker.pending.append((request_id, slot))
        try:
            await self._send(worker, pickle.dumps((kind, request_id, body),
                                                  protocol=pickle.HIGHEST_PROTOCOL))
        except IngestUnavailable as exc:
            slot.error = exc
            slot.done.set()
        return slot

    async def _workers_up(self) -> list[_Worker]:
        if not self._ready.is_set():
            with trio.move_on_after(START_TIMEOUT_S):
                await self._ready.wait()
        workers = self._alive()
        if not workers:
            raise IngestUnavailable("no ingest worker is running")
        return workers

    async def verify(self, wires: Sequence[bytes]) -> VerifiedBatch:
        """Verify ``wires`` on the workers (split between them); columns in input order."""
        workers = await self._workers_up()
        parts = min(len(workers), max(1, len(wires) // MIN_SPLIT))
        step = -(-len(wires) // parts) if wires else 0
        start = self._next
        self._next += parts
        slots = [await self._submit(workers[(start + k) % len(workers)], "verify",
                                    list(wires[k * step : (k + 1) * step]))
                 for k in range(parts)]
        out = VerifiedBatch()
        for slot in slots:
            await slot.done.wait()
            if slot.error is not None:
                raise slot.error
            assert isinstance(slot.result, VerifiedBatch)
            out.extend(slot.result)
        return out

    def remote_writer(self, db_url: str, sqlite_synchronous: str, sqlite_cache_mib: int = 0
                      ) -> RemoteWriter:
        """The store's writer of fetched events (``EventStore(remote_writer=...)``): appends on
        a worker (its connection's page cache: ``sqlite_cache_mib``)."""

        async def write(records: Sequence[EventRecord], received_at: int
                        ) -> tuple[AppendResult, dict[str, str]]:
            return await self.append(AppendRequest(
                db_url, sqlite_synchronous, received_at, [r.recon_key for r in records],
                [r.message_id for r in records], [r.channel for r in records],
                [r.sender for r in records], [r.lamport for r in records],
                [r.wire for r in records], [r.lanes or () for r in records], sqlite_cache_mib))

        return write

    async def append(self, request: AppendRequest) -> tuple[AppendResult, dict[str, str]]:
        """Have one worker append ``request``'s rows in its own transaction: what it stored
        and, per message id, why it could not (``storage.append_isolating``).

        The caller must hold the store's write token. ``IngestUnavailable`` means the worker
        died with the request: it may or may not have committed, and the caller, still
        holding the token, settles that by reading the log.
        """
        workers = await self._workers_up()
        worker = workers[self._next % len(workers)]
        self._next += 1
        slot = await self._submit(worker, "append", request)
        await slot.done.wait()
        if slot.error is not None:
            raise slot.error
        answer = slot.result
        assert isinstance(answer, tuple) and isinstance(answer[0], AppendResult)
        return answer[0], dict(answer[1])
