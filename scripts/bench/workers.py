"""Shared by the benchmarks that run each stack in a worker subprocess and keep a window of
messages in flight (transport_bench, idontwant_bench): the delivery count a sender waits on,
the spawn of one worker and the median of the workers' runs. No node or libp2p import, so the
stock workers can use it."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import trio

__all__ = ["Counter", "median", "spawn_worker"]


class Counter:
    """Messages received; a sender waits on it to keep a window of messages in flight."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = trio.Event()

    def add(self) -> None:
        self.count += 1
        self._changed.set()

    async def reach(self, n: int) -> None:
        """Return once ``count >= n`` (rechecked at least once a second)."""
        while self.count < n:
            self._changed = trio.Event()
            with trio.move_on_after(1.0):
                await self._changed.wait()


def spawn_worker(script: str, worker: str, n: int, root: Path,
                 env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``script --worker WORKER --messages N`` in a fresh interpreter (our compat patches
    libp2p for the whole process) with ``env`` added to ours; its last stdout line is its JSON
    result, ``{}`` if it failed (its stderr's tail is printed)."""
    done = subprocess.run(
        [sys.executable, script, "--worker", worker, "--messages", str(n)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(root), **(env or {})})
    if done.returncode != 0:
        print(f"{worker}: worker failed\n{done.stderr[-3000:]}", file=sys.stderr)
        return {}
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def median(runs: list[dict[str, float]], key: str, digits: int = 1) -> float | None:
    """The median of ``key`` over the runs that have it (a failed worker's run is ``{}``)."""
    values = [r[key] for r in runs if key in r]
    return round(statistics.median(values), digits) if values else None
