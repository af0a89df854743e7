"""The daemon's access to the database: batched writes, reads in worker threads.

Writes from every source (local publishes, gossip, Recon) queue here; one writer task commits
them in batches (``storage.batch_max_events`` / ``batch_max_delay_ms``) and only then wakes
each caller, so an event is acknowledged only after its transaction committed.

Fetched events (``submit_fetched``) can be written by an ingest worker process instead
(``remote_writer``; docs/bench/cluster.md, "the ingest worker as writer"): they stay items
of the same queue, committed in queue order by the writer task, which hands each run to its
writer (``node.store.commits.CommitWriter``: ``LocalWriter`` or ``WorkerWriter``) and waits for
its commit. The writer task is thus the one write token: a worker never races the daemon for
SQLite's lock, and the log keeps the order in which SDS delivered.

What happens to each record is reported, in order, on ``reports`` (``node.store.reports``: queued,
committed, failed), which the replication driver reads; the commit observers given at
construction (``node.store.signal``: the commit signal the API and the applications pull from,
the snapshot scheduler's count) hear of each commit as it finishes and never call into a core.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio
from sqlalchemy import Connection, Engine

from node.store.commits import (
    CommitRun,
    CommitWriter,
    LocalWriter,
    RemoteWriter,
    WorkerWriter,
    gather,
    runs_by,
    split_result,
)
from node.store.reports import Committed, Failed, Queued, StoreReport
from node.store.signal import CommitObserver
from node.store.thread import CommitThread
from node.telemetry.logs import kv
from storage import (
    AppendResult,
    EventRecord,
    stored_message_ids,
    write_transaction,
)

__all__ = ["EventStore", "StoreClosed", "StoreRejected"]

log = logging.getLogger("syncnode.store")
T = TypeVar("T")


#: A remote (worker) append takes up to this many store batches (``storage.batch_max_events``).
FETCHED_RUN_BATCHES = 8


class StoreClosed(RuntimeError):
    pass


class StoreRejected(ValueError):
    """An event that no backend can store (``storage.record_problem``)."""


@dataclass
class _Pending:
    records: Sequence[EventRecord]
    # Written in the same transaction as the records (an idempotency key with its answer).
    also: Callable[[Connection], None] | None = None
    done: trio.Event = field(default_factory=trio.Event)
    result: AppendResult | None = None
    error: BaseException | None = None
    #: Fetched events, for the remote writer when there is one.
    fetched: bool = False
    #: Committed as soon as the writer is free (a fetch waits behind it), not gathered with
    #: relayed events for ``relayed_delay``.
    prompt: bool = False
    #: Our own events, acknowledged after the commit: committed at the full durability level
    #: (relayed and fetched events, which peers hold and Recon fetches again, may use the
    #: relayed level; docs/node.md "Durability contract").
    durable: bool = False


def _waited_for(pending: _Pending) -> bool:
    """A caller waits for this item's commit (a publish), or a fetch's backlog is behind it."""
    return pending.durable or pending.fetched or pending.prompt or pending.also is not None


class EventStore:
    def __init__(self, engine: Engine, *, max_batch: int = 512, max_delay_ms: int = 5,
                 relayed_delay_ms: int | None = None,
                 remote_writer: RemoteWriter | None = None, reports: bool = False,
                 observers: Sequence[CommitObserver] = ()) -> None:
        """``remote_writer``: commits ``submit_fetched`` runs in an ingest worker
        (``IngestPool.remote_writer``); None: every run is committed here. ``reports``: keep
        the report channel (``node.store.reports``) for a driver that reads it (the daemon);
        off, nothing is kept (a tool with no driver would only fill memory). ``observers``:
        called in the trio thread after each commit with what was new (``CommitObserver``);
        the replication driver reads ``reports`` instead."""
        self.engine = engine
        self.max_batch = max_batch
        self.max_delay = max_delay_ms / 1000
        # A batch of relayed events (nobody waits for their commit) gathers longer: fewer
        # commits per relayed event, and an own publish arriving meanwhile shares its commit.
        self.relayed_delay = max(self.max_delay, (relayed_delay_ms if relayed_delay_ms
                                                  is not None else max_delay_ms) / 1000)
        self._send, self._recv = trio.open_memory_channel[_Pending](math.inf)
        # Every local commit of the writer task runs in this one thread (one queue hand-off
        # per batch, not a thread-pool round trip).
        self._thread = CommitThread()
        self.batches = 0
        self.committed_events = 0
        self.failed_events = 0
        # Records that were in the log already (SDS drops received duplicates before this).
        self.duplicate_events = 0
        self._observers = tuple(observers)
        # Unbounded like the write queue it mirrors (each queued record is reported once, and
        # once more when committed); the driver reads it without awaiting anything else.
        self._report_send, self.reports = trio.open_memory_channel[StoreReport](math.inf)
        self._reporting = reports
        # Set (and replaced) after each commit: ``wait_room`` waits on it.
        self._drained = trio.Event()
        # Message ids queued and not yet committed (or failed): with the database they answer
        # "is this id in the log?" for channels that keep only recent ids in memory.
        self._queued: dict[str, int] = {}
        #: Questions ``stored_ids`` sent to the database.
        self.id_lookups = 0
        self._local = LocalWriter(engine, self._thread.run)
        self._worker = (WorkerWriter(remote_writer, self.read) if remote_writer is not None
                        else None)
        self._fetched: CommitWriter = self._worker or self._local

    @property
    def remote_appends(self) -> int:
        """Runs of fetched events appended by the remote writer."""
        return self._worker.appends if self._worker is not None else 0

    @property
    def remote_settled(self) -> int:
        """Runs whose remote writer died with them (settled by reading the log)."""
        return self._worker.settled if self._worker is not None else 0

    def _report(self, report: StoreReport) -> None:
        if self._reporting:
            self._report_send.send_nowait(report)

    async def append(
        self, records: Sequence[EventRecord], also: Callable[[Connection], None] | None = None
    ) -> AppendResult:
        """Queue records and return once they are committed (or raise the commit's error).

        ``also`` runs inside the same transaction: it is committed exactly when the records are.
        """
        pending = _Pending(records, also, durable=True)
        try:
            self._send.send_nowait(pending)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise StoreClosed("the event store is shut down") from None
        self._note_queued(records, 1)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def submit(self, records: Sequence[EventRecord], *, prompt: bool = False) -> None:
        """Queue records without waiting for the commit (used for relayed events). ``prompt``:
        a fetch's backlog waits behind them (events SDS delivered while it ingested a fetched
        batch), so they are not gathered with relayed events for ``relayed_delay``."""
        try:
            self._send.send_nowait(_Pending(records, prompt=prompt))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            log.warning("store closed; %d relayed events not stored (peers resend)", len(records))
            return
        self._note_queued(records, 1)

    def submit_fetched(self, records: Sequence[EventRecord]) -> None:
        """``submit`` for fetched events: written by the remote writer when one is set."""
        try:
            self._send.send_nowait(_Pending(records, fetched=True))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            log.warning("store closed; %d fetched events not stored (refetched later)",
                        len(records))
            return
        self._note_queued(records, 1)

    def _note_queued(self, records: Sequence[EventRecord], delta: int) -> None:
        if delta > 0:
            self._report(Queued(records))
        queued = self._queued
        for record in records:
            mid = record.message_id
            count = queued.get(mid, 0) + delta
            if count > 0:
                queued[mid] = count
            else:
                queued.pop(mid, None)

    @property
    def backlog(self) -> int:
        """Events queued and not committed yet (distinct message ids)."""
        return len(self._queued)

    async def wait_room(self, limit: int) -> None:
        """Return once fewer than ``limit`` events wait for their commit (a fetch that runs
        ahead of a slow store waits here instead of filling memory with its queue)."""
        while len(self._queued) >= limit:
            await self._drained.wait()

    async def stored_ids(self, channel: str, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` in ``channel``'s log: committed, or queued to be (an SDS channel's
        ``ReadDelivered`` request, answered between its steps, never inside one).

        The database is read in a worker thread; the queue is looked at before and after, so
        that a write committed while the query ran is not missed.
        """
        queued = self._queued
        found = {mid for mid in ids if mid in queued}
        rest = [mid for mid in ids if mid not in found]
        if rest:
            self.id_lookups += 1
            found |= await self.read(stored_message_ids, channel, rest)
            found.update(mid for mid in rest if mid in queued)
        return found

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a repository function with a fresh connection in a worker thread."""

        def run() -> T:
            with self.engine.connect() as conn:
                return fn(conn, *args)

        return await trio.to_thread.run_sync(run)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a repository function inside its own transaction in a worker thread."""

        def run() -> T:
            with write_transaction(self.engine) as conn:
                return fn(conn, *args)

        return await trio.to_thread.run_sync(run)

    async def run_writer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        try:
            await self._write_loop()
        finally:
            self._thread.stop()

    async def _write_loop(self) -> None:
        async with self._recv:
            while True:
                try:
                    first = await self._recv.receive()
                except trio.EndOfChannel:
                    return
                # Fetched events go to a worker in runs of several store batches: one round
                # trip and one COMMIT (fsync) for each, during a catch-up whose queue is long.
                cap = self.max_batch
                if first.fetched and self._worker is not None:
                    cap *= FETCHED_RUN_BATCHES
                await self._commit(await gather(
                    self._recv, first, lambda p: len(p.records), cap, self.max_delay,
                    patient_delay=self.relayed_delay, waits=_waited_for))

    async def close(self) -> None:
        """Stop accepting writes; the writer drains what is queued and returns."""
        await self._send.aclose()

    async def _commit(self, batch: list[_Pending]) -> None:
        # Runs of fetched items go to the fetched writer, the rest is committed here; in queue
        # order either way (the order of the log).
        remote = self._worker is not None
        for run in runs_by(batch, lambda pending: pending.fetched and remote):
            records = [r for pending in run for r in pending.records]
            try:
                await self._commit_run(run, records)
            finally:
                self._note_queued(records, -1)
                self._drained.set()
                self._drained = trio.Event()

    async def _commit_run(self, batch: list[_Pending], records: list[EventRecord]) -> None:
        writer = self._fetched if batch[0].fetched else self._local
        # A caller's extra write goes with its last record (a publish's own event).
        also_of = {p.records[-1].message_id: p.also for p in batch if p.also and p.records}
        run = CommitRun(records, [p.also for p in batch if p.also], also_of,
                        durable=any(p.durable for p in batch))
        # A commit once started is finished and reported, even when the node stops (a worker
        # writer is then killed by its pool, and the log settles what it wrote).
        with trio.CancelScope(shield=True):
            combined, errors = await writer.commit(run)
        self._finish(batch, records, combined, errors)

    def _finish(self, batch: list[_Pending], records: list[EventRecord],
                combined: AppendResult, errors: dict[str, BaseException]) -> None:
        for mid, why in combined.rejected:
            errors.setdefault(mid, StoreRejected(why))
        self.batches += 1
        self.committed_events += len(combined.inserted)
        self.duplicate_events += len(combined.duplicates)
        split = split_result([p.records for p in batch], combined, errors)
        for pending, (result, error) in zip(batch, split, strict=True):
            pending.result, pending.error = result, error
            pending.done.set()
        failed = [r for r in records if r.message_id in errors]
        if failed:
            self.failed_events += len(failed)
            log.warning("events not stored", extra=kv(count=len(failed),
                                                      reason=str(errors[failed[0].message_id])))
            self._report(Failed(failed))
        # The batch is reported once, as one commit.
        self._report(Committed(combined, records))
        for observer in self._observers:
            observer(combined, records)
