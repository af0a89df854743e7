"""Clocks for tests: a manual one for code that runs outside trio (node.clock's protocol: time
moves only when the test says so), one whose wall clock runs ahead (a node started on it
finds what it saved older than it is), and ``let_pass`` for trio tests on a MockClock."""

from __future__ import annotations

import trio
from trio.testing import MockClock

from node.clock import SystemClock

__all__ = ["AheadClock", "ManualClock", "let_pass"]


class ManualClock:
    def __init__(self, now: float = 1000.0, wall: float = 1_700_000_000.0) -> None:
        self._now = now
        self._wall = wall

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._wall += seconds


class AheadClock(SystemClock):
    """The daemon's clock with its wall time ``ahead`` seconds later than the system's: a node
    started again on it finds every wall-clock deadline it saved (SDS's resends) as far past
    as after being down that much longer, without the test waiting for it. Its monotonic time
    (timers, sessions, liveness) is the daemon's own."""

    def __init__(self, ahead: float) -> None:
        self.ahead = ahead

    def wall(self) -> float:
        return super().wall() + self.ahead


async def let_pass(seconds: float) -> None:
    """Let ``seconds`` of the run's clock pass, with every task running meanwhile: virtual time
    only. On anything but trio's MockClock it raises, so that a test cannot lose real seconds
    through it (tests/node/test_sleep_budget.py counts the real sleeps)."""
    if not isinstance(trio.lowlevel.current_clock(), MockClock):
        raise RuntimeError("let_pass is virtual time: run the test on trio.testing.MockClock")
    await trio.sleep(seconds)
