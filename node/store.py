"""The daemon's access to the database: batched writes, reads in worker threads.

Writes from every source (local publishes, gossip, Recon) queue here; one writer task commits
them in batches (``storage.batch_max_events`` / ``batch_max_delay_ms``) and only then wakes
each caller, so an event is acknowledged only after its transaction committed.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio
from sqlalchemy import Connection, Engine

from storage import AppendResult, EventRecord, append_events, write_transaction

__all__ = ["EventStore", "StoreClosed"]

log = logging.getLogger("syncnode.store")
T = TypeVar("T")


class StoreClosed(RuntimeError):
    pass


@dataclass
class _Pending:
    records: Sequence[EventRecord]
    # Written in the same transaction as the records (an idempotency key with its answer).
    also: Callable[[Connection], None] | None = None
    done: trio.Event = field(default_factory=trio.Event)
    result: AppendResult | None = None
    error: BaseException | None = None


class EventStore:
    def __init__(self, engine: Engine, *, max_batch: int = 512, max_delay_ms: int = 5) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.max_delay = max_delay_ms / 1000
        self._send, self._recv = trio.open_memory_channel[_Pending](math.inf)
        self.batches = 0
        self.committed_events = 0
        self._listeners: list[Callable[[AppendResult, Sequence[EventRecord]], None]] = []

    def on_commit(self, listener: Callable[[AppendResult, Sequence[EventRecord]], None]) -> None:
        """Call ``listener`` (in the trio thread) after each commit with what was new."""
        self._listeners.append(listener)

    async def append(
        self, records: Sequence[EventRecord], also: Callable[[Connection], None] | None = None
    ) -> AppendResult:
        """Queue records and return once they are committed (or raise the commit's error).

        ``also`` runs inside the same transaction: it is committed exactly when the records are.
        """
        pending = _Pending(records, also)
        try:
            self._send.send_nowait(pending)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise StoreClosed("the event store is shut down") from None
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def submit(self, records: Sequence[EventRecord]) -> None:
        """Queue records without waiting for the commit (used for relayed events)."""
        try:
            self._send.send_nowait(_Pending(records))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            log.warning("store closed; %d relayed events not stored (peers resend)", len(records))

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
        async with self._recv:
            while True:
                try:
                    first = await self._recv.receive()
                except trio.EndOfChannel:
                    return
                batch = [first]
                size = len(first.records)
                with trio.move_on_after(self.max_delay):
                    while size < self.max_batch:
                        try:
                            more = await self._recv.receive()
                        except trio.EndOfChannel:
                            break
                        batch.append(more)
                        size += len(more.records)
                while size < self.max_batch:
                    try:
                        more = self._recv.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    batch.append(more)
                    size += len(more.records)
                await self._commit(batch)

    async def close(self) -> None:
        """Stop accepting writes; the writer drains what is queued and returns."""
        await self._send.aclose()

    async def _commit(self, batch: list[_Pending]) -> None:
        records = [r for pending in batch for r in pending.records]

        def run() -> AppendResult:
            # One statement for the whole batch (during a catch-up a batch is hundreds of
            # single-event submissions); the result is split per caller below.
            with write_transaction(self.engine) as conn:
                result = append_events(conn, records, int(time.time() * 1000))
                for pending in batch:
                    if pending.also is not None:
                        pending.also(conn)
                return result

        try:
            # Not cancellable: a commit once started must be allowed to finish and be reported.
            combined = await trio.to_thread.run_sync(run, abandon_on_cancel=False)
        except Exception as exc:  # a failed commit fails its callers; the daemon keeps going
            log.error("batch commit failed", exc_info=True)
            for pending in batch:
                pending.error = exc
                pending.done.set()
            return
        self.batches += 1
        self.committed_events += len(combined.inserted)
        seq_of = {mid: seq for seq, mid in combined.inserted}
        for pending in batch:
            inserted, duplicates = [], []
            for record in pending.records:
                seq = seq_of.pop(record.message_id, None)
                if seq is None:
                    duplicates.append(record.message_id)
                else:
                    inserted.append((seq, record.message_id))
            pending.result = AppendResult(tuple(inserted), tuple(duplicates))
            pending.done.set()
        # Listeners see the batch once, as one commit.
        for listener in self._listeners:
            listener(combined, records)
