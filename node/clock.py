"""The one clock a node's drivers read, injected (a small protocol): ``now()`` is the monotonic
time the sans-IO cores take as ``now`` (timers, backoff, claims, session deadlines, bans, the
connection manager, liveness), ``wall()`` Unix seconds (Lamport bounds, key heights, the
address book and what is shown to people). In the daemon ``now`` is trio's clock, so cancel
scopes and the cores agree; tests run a driver on ``trio.testing.MockClock`` with
:class:`TrioWallClock`, whose wall time moves with it (no sleeping to let time pass).

trio's clock has a random offset from ``time.monotonic()``: an instant from one never compares
with an instant from the other. So the daemon's entry (``node.node_main``) builds one clock and
``serve`` hands it down (``NodeRuntime.clock``) to the p2p host (``open_host``) and to every
driver, each taking it as a required parameter; tests/node/test_clock_reads.py fails when code
in ``node/`` reads time or builds a clock of its own. It imports nothing of ``node/`` (the p2p
layer and the replication drivers both use it).
"""

from __future__ import annotations

import time
from typing import Protocol

import trio

__all__ = ["Clock", "SystemClock", "TrioWallClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds (trio's clock in a driver: its deadlines are cancel scopes')."""
        ...

    def wall(self) -> float:
        """Unix seconds."""
        ...


class SystemClock:
    """trio's clock for ``now``; the system's wall clock (it follows NTP steps) for ``wall``."""

    def now(self) -> float:
        return trio.current_time()

    def wall(self) -> float:
        return time.time()


def _trio_time() -> float:
    """trio's clock, from the trio thread or from one of its worker threads (where the
    applications' batches run and read ``wall()``)."""
    try:
        return trio.current_time()
    except RuntimeError:  # not the trio thread: ask it
        return trio.from_thread.run_sync(trio.current_time)


class TrioWallClock:
    """Both from trio's clock: ``wall`` is ``origin`` plus trio's time, so a ``MockClock``
    (which starts at 0) that jumps moves the wall clock with it. For tests."""

    def __init__(self, origin: float) -> None:
        self.origin = origin

    def now(self) -> float:
        return _trio_time()

    def wall(self) -> float:
        return self.origin + _trio_time()
