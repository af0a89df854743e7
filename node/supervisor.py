"""Every long-lived task of the daemon runs under :func:`supervise`: no task can end the node.

An unexpected error in a service (a bug, or a library raising what it should not) used to
unwind the daemon's nursery and stop the whole process. Now it is logged with the full
traceback of each leaf exception (``node.leaves``), counted in
``node_task_failures_total{task=...}``, and the task is started again after a back-off that
doubles from ``FIRST_BACKOFF_S`` to ``MAX_BACKOFF_S`` (reset once a run lasted that long), while
the rest of the node keeps serving. Cancellation (shutdown) is not an error and passes through.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from node.clock import Clock
from node.leaves import format_leaves, summarise_leaves
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics

__all__ = ["FIRST_BACKOFF_S", "MAX_BACKOFF_S", "TASK_FAILURES", "supervise"]

log = logging.getLogger("syncnode.supervisor")
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
TASK_FAILURES = "node_task_failures_total"


async def supervise(name: str, run: Callable[[], Awaitable[None]], metrics: Metrics,
                    clock: Clock) -> None:
    """Run ``run()`` until it returns; restart it (with back-off) whenever it raises."""
    backoff = FIRST_BACKOFF_S
    while True:
        started = clock.now()
        try:
            await run()
            return
        except Exception as exc:  # containing every error is the point
            if clock.now() - started >= MAX_BACKOFF_S:
                backoff = FIRST_BACKOFF_S  # it ran a good while: a fresh fault, not a loop
            metrics.inc(TASK_FAILURES, task=name)
            log.error("task failed; restarting it", extra=kv(
                task=name, restart_in_s=backoff, error=summarise_leaves(exc),
                traceback=format_leaves(exc).replace("\n", " | ")))
        await trio.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_S)
