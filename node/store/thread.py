"""The store writer's thread: one long-lived thread runs every commit of ``EventStore``'s writer
task, fed by a queue, each result handed back to the waiting trio task through the trio token.

``trio.to_thread.run_sync`` per commit cost ~94 µs of CPU per round trip here (capacity
limiter, thread cache hand-off, a fresh thread-local context); this hand-off costs ~57 µs
(docs/bench/transport.md, "Store hand-off"). The commit order is the queue's: one thread, first
in first out, as the writer task already awaits each commit before the next. A commit once
started is finished and reported: the waiting task is not cancellable (the store's durability
contract: a publish is answered after its transaction committed, and never abandoned midway).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

__all__ = ["CommitThread"]

T = TypeVar("T")
_Job = tuple[Callable[[], Any], trio.lowlevel.Task]


class CommitThread:
    """Runs ``fn()`` calls one at a time, in order, in one thread started on first use."""

    def __init__(self, name: str = "syncnode-store-writer") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the thread; its result or exception here, once it returned."""
        if self._thread is None:
            self._token = trio.lowlevel.current_trio_token()
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()
        self._jobs.put((fn, trio.lowlevel.current_task()))

        def abort(_raise_cancel: Any) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.FAILED  # finished and reported, never abandoned

        # The thread reschedules this task with ``outcome.capture(fn)``: unwrapped here.
        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def stop(self) -> None:
        """Let the thread end once the jobs queued before this one ran (no waiting here)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    def _loop(self) -> None:
        token = self._token
        assert token is not None
        while (job := self._jobs.get()) is not None:
            fn, task = job
            result = outcome.capture(fn)
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)
