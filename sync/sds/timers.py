"""A deadline queue: one heap for every timer of a channel, with lazy cancellation."""

from __future__ import annotations

import heapq
from enum import IntEnum

__all__ = ["TimerKind", "TimerQueue"]


class TimerKind(IntEnum):
    LOST = 0
    RESEND = 1
    REPAIR_RESPONSE = 2
    REPAIR_REQUEST = 3
    SYNC = 4


class TimerQueue:
    """Deadlines keyed by (kind, key). Rescheduling or cancelling leaves the old heap entry in
    place; it is skipped when it surfaces (its deadline no longer matches)."""

    def __init__(self) -> None:
        self._due: dict[tuple[TimerKind, str], float] = {}
        self._heap: list[tuple[float, int, str]] = []

    def __len__(self) -> int:
        return len(self._due)

    def schedule(self, kind: TimerKind, key: str, when: float) -> None:
        if self._due.get((kind, key)) == when:
            return
        self._due[(kind, key)] = when
        heapq.heappush(self._heap, (when, kind, key))
        if len(self._heap) > 4 * len(self._due) + 64:
            self._compact()

    def cancel(self, kind: TimerKind, key: str) -> None:
        self._due.pop((kind, key), None)

    def due(self, kind: TimerKind, key: str) -> float | None:
        return self._due.get((kind, key))

    def _compact(self) -> None:
        self._heap = [(w, k, key) for (k, key), w in self._due.items()]
        heapq.heapify(self._heap)

    def _clean(self) -> None:
        heap = self._heap
        while heap:
            when, kind, key = heap[0]
            if self._due.get((TimerKind(kind), key)) == when:
                return
            heapq.heappop(heap)

    def next_deadline(self) -> float | None:
        self._clean()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[tuple[TimerKind, str]]:
        """Remove and return every timer due at ``now``, earliest first."""
        out: list[tuple[TimerKind, str]] = []
        while True:
            self._clean()
            if not self._heap or self._heap[0][0] > now:
                return out
            _, kind, key = heapq.heappop(self._heap)
            out.append((TimerKind(kind), key))
            del self._due[(TimerKind(kind), key)]
