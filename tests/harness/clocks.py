"""A clock for tests that run outside trio (node.clock's protocol): time moves only when the
test says so."""

from __future__ import annotations

__all__ = ["ManualClock"]


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
