"""Recon key-store work off the trio thread: one worker thread at a time, the inserts never wait.

A Recon message can cost seconds of range hashing, splitting and key listing (a hostile peer's
3.3 MB of made-up ranges: ~1.6 s). Done on the trio thread, that froze every other task of the
node, the local API's publishes with them (issue 28: p50 10 ms -> 1.5 s). So every call into the
``ReconSession`` (and hence into the ``SummaryKeyStore``) runs in a worker thread, one at a time
(a limiter of 1 over all sessions: ten peers cannot keep ten threads contending for the GIL), and
holding ``lock``. The trio thread still inserts the keys of each commit: when a worker holds the
lock it queues them instead of waiting, and whoever holds the lock next applies them first.
The summary saver takes the lock without waiting (``try_locked``): it skips a round rather than
stall the node.

The key store reads no SQL (sync/recon/reads.py): a step that lacks reads waits where it must
read and returns the action ``ReadKeys``; the driver reads them here with its ``SqlKeyReader``,
with the lock still held (no insert comes between the answer and the step that uses it), and
feeds them back to the core as the session's ``KeysRead`` input, on which the step goes on
(:meth:`KeyStoreWork.step`). The bucket splits after an insert ask the same way
(``sync.recon.insert_keys``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import trio

from sync.recon import KeyReader, KeysRead, SummaryKeyStore, carry_out_reads, insert_keys
from sync.replication import Action

__all__ = ["KeyStoreWork"]

T = TypeVar("T")


class KeyStoreWork:
    def __init__(self, keys: SummaryKeyStore, reader: KeyReader) -> None:
        self.keys = keys
        self.reader = reader
        self.answered_reads = 0
        self.lock = threading.Lock()
        self._queued: list[bytes] = []
        self._limiter = trio.CapacityLimiter(1)

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the Recon worker thread, with the key store to itself. It answers no
        key-store reads: a Recon step goes through :meth:`step`."""

        def locked() -> T:
            with self.lock:
                self._apply()
                result = fn()
                self._apply()
            self._catch_up()
            return result

        return await trio.to_thread.run_sync(locked, limiter=self._limiter)

    async def step(self, fn: Callable[[], list[Action]],
                   keys_read: Callable[[KeysRead], list[Action]]) -> list[Action]:
        """``fn()`` (a session's step: ``ReplicationCore.start``, ``receive``, ``charged``) in
        the Recon worker thread; while its actions are a ``ReadKeys``, the reads are made here
        and fed back (``keys_read``: ``ReplicationCore.keys_read`` for the session)."""
        return await self.run(lambda: self._answering(fn(), keys_read))

    def _answering(self, actions: list[Action],
                   keys_read: Callable[[KeysRead], list[Action]]) -> list[Action]:
        """Carry out the ``ReadKeys`` of ``actions`` (a step's) until the step runs through.
        Each answer lets the step go on; the session bounds the rounds one read may take
        (``sync.recon.reads.MAX_ROUNDS``), the key store the answers it holds
        (``SummaryKeyStore.answer_keys``)."""
        def counted(answer: KeysRead) -> list[Action]:
            self.answered_reads += len(answer.reads.ranges) + bool(answer.reads.present)
            return keys_read(answer)

        return carry_out_reads(actions, self.reader, counted)

    def insert_many(self, keys: Iterable[bytes]) -> None:
        """From the trio thread: insert now if the store is free, else queue for its holder."""
        self._queued.extend(keys)
        self._catch_up()

    @contextmanager
    def try_locked(self) -> Iterator[bool]:
        """The store to ourselves, with every queued key applied (True), or busy (False)."""
        if not self.lock.acquire(blocking=False):
            yield False
            return
        try:
            self._apply()
            yield True
        finally:
            self.lock.release()

    def _catch_up(self) -> None:
        # Keys queued while the lock was held, after its holder applied the queue: apply them
        # unless someone else holds the lock (it applies them then).
        while self._queued and self.lock.acquire(blocking=False):
            try:
                self._apply()
            finally:
                self.lock.release()

    def _apply(self) -> None:
        queued, self._queued = self._queued, []
        if queued:
            insert_keys(self.keys, queued, self.reader)
