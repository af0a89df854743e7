"""The one clock a replication driver reads, injected (a small protocol): ``now()`` is the
monotonic time the sans-IO cores take as ``now`` (timers, backoff, claims, session deadlines),
``wall()`` Unix seconds (Lamport bounds, key heights). In the daemon ``now`` is trio's clock, so
cancel scopes and the cores agree; tests run a driver on ``trio.testing.MockClock`` with
:class:`TrioWallClock`, whose wall time moves with it (no sleeping to let time pass).
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


class TrioWallClock:
    """Both from trio's clock: ``wall`` is ``origin`` plus trio's time, so a ``MockClock``
    (which starts at 0) that jumps moves the wall clock with it. For tests."""

    def __init__(self, origin: float) -> None:
        self.origin = origin

    def now(self) -> float:
        return trio.current_time()

    def wall(self) -> float:
        return self.origin + trio.current_time()
