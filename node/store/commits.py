"""The store's commits: gathering a batch from the queue, cutting it into the fetched writer's
runs and local ones, and the one writer interface (:class:`CommitWriter`) over both commit
paths: :class:`LocalWriter` (one transaction for a whole batch, or one per event to isolate the
events that fail, in the store's writer thread, ``node.store.thread``, never cancelled once
started) and :class:`WorkerWriter` (a run of fetched events appended by an ingest worker, and
what it stored when it died); the result split per caller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import trio
from sqlalchemy import Connection, Engine

from node.telemetry.logs import kv
from storage import (
    AppendResult,
    EventRecord,
    append_events,
    max_seq,
    seqs_of_message_ids,
    write_transaction,
)

__all__ = [
    "CommitRun",
    "CommitWriter",
    "LocalWriter",
    "RemoteWriter",
    "StoreFailed",
    "WorkerWriter",
    "commit_remote",
    "gather",
    "insert_one_by_one",
    "insert_records",
    "runs_by",
    "split_result",
]

log = logging.getLogger("syncnode.store")
P = TypeVar("P")
Q = TypeVar("Q")

#: Appends records in another process, in one transaction (``storage.append_isolating``):
#: what was stored and, per message id, why not. Raises if the writer died with the request.
RemoteWriter = Callable[[Sequence[EventRecord], int], Awaitable[tuple[AppendResult,
                                                                       dict[str, str]]]]
#: ``EventStore.read``: a repository function run with a connection in a worker thread.
Reader = Callable[..., Awaitable[Any]]
#: Runs a blocking function in a thread: ``CommitThread.run`` (the store's writer thread).
Runner = Callable[[Callable[[], AppendResult]], Awaitable[AppendResult]]
#: A caller's extra write in the transaction of its records (an idempotency key's answer).
Extra = Callable[[Connection], None]


async def _in_worker_thread(fn: Callable[[], AppendResult]) -> AppendResult:
    # Not cancellable: a commit once started must be allowed to finish and be reported.
    return await trio.to_thread.run_sync(fn, abandon_on_cancel=False)


class StoreFailed(RuntimeError):
    """The database refused an event a remote writer tried to store (its error, as text)."""


async def insert_records(engine: Engine, records: Sequence[EventRecord],
                         extras: Sequence[Callable[[Connection], None]] = (), *,
                         durable: bool = True, run: Runner = _in_worker_thread) -> AppendResult:
    """Append ``records`` and run ``extras`` in one transaction (``durable``: at the engine's
    level for our own events, else at its relayed level; ``storage.write_transaction``), in a
    thread: ``run`` (not cancellable once started)."""
    def commit() -> AppendResult:
        with write_transaction(engine, durable=durable) as conn:
            # A worker thread (no trio clock here); stored-at stamps are real Unix time.
            result = append_events(conn, records, int(time.time() * 1000))
            for extra in extras:
                extra(conn)
            return result

    return await run(commit)


async def insert_one_by_one(
    engine: Engine, records: Sequence[EventRecord], first_error: BaseException,
    also_of: dict[str, Callable[[Connection], None]] | None = None, *, durable: bool = True,
    run: Runner = _in_worker_thread,
) -> tuple[AppendResult, dict[str, BaseException]]:
    """The batch failed as a whole: one transaction per event isolates the failing ones
    (a full disk or a lost database fails them all, and all are reported failed)."""
    if len(records) == 1:
        return AppendResult((), ()), {records[0].message_id: first_error}
    inserted: list[tuple[int, str]] = []
    duplicates: list[str] = []
    rejected: list[tuple[str, str]] = []
    errors: dict[str, BaseException] = {}
    for record in records:
        try:
            extra = (also_of or {}).get(record.message_id)
            result = await insert_records(engine, [record], [extra] if extra else [],
                                          durable=durable, run=run)
        except Exception as exc:
            errors[record.message_id] = exc
            continue
        inserted.extend(result.inserted)
        duplicates.extend(result.duplicates)
        rejected.extend(result.rejected)
    return AppendResult(tuple(inserted), tuple(duplicates), tuple(rejected)), errors


async def commit_remote(read: Reader, writer: RemoteWriter, records: list[EventRecord],
                        high_seq: int) -> tuple[AppendResult, dict[str, BaseException], bool]:
    """Have ``writer`` append ``records``: (result, errors by message id, settled). Settled:
    the writer died with the batch, before or after its COMMIT; the caller still holds the
    write token, so the log says exactly which rows it wrote: those of the batch above
    ``high_seq``, the highest seq committed before."""
    try:
        # Stored-at, as the local commit stamps it (real Unix time, read in its thread).
        combined, why = await writer(records, int(time.time() * 1000))
    except Exception as exc:
        log.error("remote writer failed; reading the log for what it stored",
                  extra=kv(events=len(records), error=repr(exc)))
        found: dict[str, int] = await read(seqs_of_message_ids, [r.message_id for r in records])
        inserted = tuple(sorted((seq, mid) for mid, seq in found.items() if seq > high_seq))
        duplicates = tuple(mid for mid, seq in found.items() if seq <= high_seq)
        error = StoreFailed(f"the ingest worker writing the batch died: {exc}")
        return AppendResult(inserted, duplicates), {
            r.message_id: error for r in records if r.message_id not in found}, True
    return combined, {mid: StoreFailed(text) for mid, text in why.items()}, False


async def gather(recv: trio.MemoryReceiveChannel[Q], first: Q, size: Callable[[Q], int],
                 cap: int, max_delay: float, *, patient_delay: float | None = None,
                 waits: Callable[[Q], bool] | None = None) -> list[Q]:
    """One commit's worth: ``first``, what comes within ``max_delay``, then what is queued
    already, up to ``cap`` records (``size`` of each item).

    With ``patient_delay``, a batch that starts with an item nobody waits for (``waits`` is
    false: relayed events) gathers for that long instead, until an item somebody waits for
    arrives: from then on for at most ``max_delay`` (a publish is not delayed by the wait).
    """
    batch = [first]
    total = size(first)
    patient = patient_delay is not None and waits is not None and not waits(first)
    with trio.move_on_after(patient_delay if patient and patient_delay is not None
                            else max_delay) as scope:
        while total < cap:
            try:
                more = await recv.receive()
            except trio.EndOfChannel:
                break
            batch.append(more)
            total += size(more)
            if patient and waits is not None and waits(more):
                patient = False
                # A cancel scope's deadline is on trio's clock by definition.
                scope.deadline = min(scope.deadline, trio.current_time() + max_delay)
    while total < cap:
        try:
            more = recv.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            break
        batch.append(more)
        total += size(more)
    return batch


def runs_by(items: Sequence[P], remote: Callable[[P], bool]) -> list[list[P]]:
    """``items`` cut into runs of the same ``remote(item)``, in order: the remote writer's
    runs and the local ones commit in queue order (the order of the log)."""
    runs: list[list[P]] = []
    for item in items:
        if runs and remote(runs[-1][0]) == remote(item):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def split_result(callers: Sequence[Sequence[EventRecord]], combined: AppendResult,
                 errors: dict[str, BaseException]
                 ) -> list[tuple[AppendResult, BaseException | None]]:
    """One commit's result, per caller (its records): what was inserted (with seqs) and what
    was there already; the error of a record that failed (the last one, if several)."""
    seq_of = {mid: seq for seq, mid in combined.inserted}
    out: list[tuple[AppendResult, BaseException | None]] = []
    for records in callers:
        inserted, duplicates = [], []
        failed: BaseException | None = None
        for record in records:
            error = errors.get(record.message_id)
            if error is not None:
                failed = error
                continue
            seq = seq_of.pop(record.message_id, None)
            if seq is None:
                duplicates.append(record.message_id)
            else:
                inserted.append((seq, record.message_id))
        out.append((AppendResult(tuple(inserted), tuple(duplicates)), failed))
    return out


@dataclass(frozen=True)
class CommitRun:
    """One run of the writer task's batch, for one writer: its records in queue order, the
    callers' extra writes (``also_of``: each by the message id of its caller's last record,
    for the one-by-one retry), and whether it holds our own events (committed at the full
    durability level)."""

    records: list[EventRecord]
    extras: list[Extra]
    also_of: dict[str, Extra]
    durable: bool


class CommitWriter(Protocol):
    """Commits one run for the store's writer task (the one write token): what was stored
    and, per message id, why not. Never cancelled once started."""

    async def commit(self, run: CommitRun) -> tuple[AppendResult, dict[str, BaseException]]: ...


class LocalWriter:
    """Commits in the daemon (the store's writer thread): the whole run in one transaction,
    or, when that fails, one per event to isolate the failing ones."""

    def __init__(self, engine: Engine, run: Runner = _in_worker_thread) -> None:
        self.engine = engine
        self.run = run

    async def commit(self, run: CommitRun) -> tuple[AppendResult, dict[str, BaseException]]:
        try:
            # One statement for the whole run (during a catch-up a run is hundreds of
            # single-event submissions); the result is split per caller by the store.
            return await insert_records(self.engine, run.records, run.extras,
                                        durable=run.durable, run=self.run), {}
        except Exception as exc:
            log.error("batch commit failed; retrying its events one by one", exc_info=True)
            return await insert_one_by_one(self.engine, run.records, exc, run.also_of,
                                           durable=run.durable, run=self.run)


class WorkerWriter:
    """Commits fetched events in an ingest worker process (``remote``). Rows above the highest
    seq committed before the run (read first: the store's writer task holds the one write
    token) are the run's, which settles what a worker that died with the run stored."""

    def __init__(self, remote: RemoteWriter, read: Reader) -> None:
        self.remote = remote
        self.read = read
        #: Runs appended by the worker, and those whose worker died (settled from the log).
        self.appends = 0
        self.settled = 0

    async def commit(self, run: CommitRun) -> tuple[AppendResult, dict[str, BaseException]]:
        high_seq: int = await self.read(max_seq)
        combined, errors, settled = await commit_remote(self.read, self.remote, run.records,
                                                        high_seq)
        if settled:
            self.settled += 1
        else:
            self.appends += 1
        return combined, errors
