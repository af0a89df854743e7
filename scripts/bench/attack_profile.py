"""Who spends the CPU during one phase of ``attack_bench.py`` (a helper module, not a benchmark).

:class:`PhaseProfile` reads each process's CPU time (user + system, ``/proc/PID/stat``) at the
start and end of the phase, so the bench can say which process the machine's two cores went to
while the honest rate was measured; with ``spy_dir`` it also records each process with
``py-spy record`` (``--nonblocking``, raw stacks; ``scripts/bench/spy_summary.py`` sums them up)
for exactly that phase. py-spy is optional: without it only the CPU times are taken.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["PhaseProfile", "cpu_seconds"]

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15)


class PhaseProfile:
    """CPU seconds (and optionally py-spy stacks) per named process over one phase."""

    def __init__(self, pids: dict[str, int], spy_dir: Path | None = None,
                 rate: int = 25) -> None:
        self.pids, self.spy_dir, self.rate = pids, spy_dir, rate
        self._start: dict[str, float] = {}
        self._began = 0.0
        self._spies: list[subprocess.Popen[bytes]] = []

    def start(self) -> PhaseProfile:
        self._began = time.monotonic()
        self._start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        spy = shutil.which("py-spy")
        if self.spy_dir is not None and spy is not None:
            self.spy_dir.mkdir(parents=True, exist_ok=True)
            for name, pid in self.pids.items():
                self._spies.append(subprocess.Popen(
                    [spy, "record", "--nonblocking", "--threads", "--rate", str(self.rate),
                     "-f", "raw", "-o", str(self.spy_dir / f"{name}.txt"), "--pid", str(pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return self

    def stop(self) -> dict[str, float]:
        """CPU seconds per process over the phase, plus ``wall_s``."""
        out = {name: round(cpu_seconds(pid) - self._start[name], 1)
               for name, pid in self.pids.items()}
        out["wall_s"] = round(time.monotonic() - self._began, 1)
        for proc in self._spies:  # py-spy writes its file on SIGINT
            proc.send_signal(signal.SIGINT)
        for proc in self._spies:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._spies = []
        return out
