"""How busy the whole machine was over a span of wall time: ``/proc/stat`` sampled every
``period_s`` by a thread, so that a benchmark can say whether a span it timed was bound by the
machine's CPU (every core busy) or by waiting (the chaos run's catch-ups, where every node of
the emulated internet shares the same cores)."""

from __future__ import annotations

import bisect
import threading
import time
from pathlib import Path

__all__ = ["MachineCpu"]


def _jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot (busy: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(fields[:8])  # guest time is counted in user time already
    return total - fields[3] - fields[4], total


class MachineCpu:
    """Samples in the background once :meth:`start` ran, until :meth:`stop`."""

    def __init__(self, period_s: float = 0.1) -> None:
        self.period_s = period_s
        self._at: list[int] = []  # wall ms of each sample
        self._busy: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> MachineCpu:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            sample = _jiffies()
            self._at.append(int(time.time() * 1000))
            self._busy.append(sample)
            self._stop.wait(self.period_s)

    def busy_fraction(self, from_ms: int, to_ms: int) -> float | None:
        """The share of all cores' time spent busy from the last sample at or before
        ``from_ms`` to the first at or after ``to_ms``; None without samples around them."""
        at = list(self._at)
        i = bisect.bisect_right(at, from_ms) - 1
        j = bisect.bisect_left(at, to_ms)
        if i < 0 or j >= len(at) or j <= i:
            return None
        (busy0, total0), (busy1, total1) = self._busy[i], self._busy[j]
        return round((busy1 - busy0) / (total1 - total0), 3) if total1 > total0 else None
