"""One Spark job as a subprocess: start it, read its progress and result lines, bound its time.

A job prints ``SYNCNODE_PROGRESS {json}`` lines (``done``, ``total``, ``phase``) and one
``SYNCNODE_RESULT {json}`` line on stdout. Whatever happens - it cannot start, fails, hangs past
its timeout, prints garbage or endless lines - :func:`run_job` returns an outcome dict and
never raises: the daemon records it and carries on.
"""

from __future__ import annotations

import json
import subprocess
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import trio

from node.clock import Clock
from spark_jobs.source import PROGRESS_PREFIX, RESULT_PREFIX

__all__ = ["JobCommand", "JobProgress", "parse_progress", "read_lines", "run_job"]

_STDERR_LINES = 20
_MAX_LINE = 1 << 20


@dataclass(frozen=True)
class JobCommand:
    name: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class JobProgress:
    """The running job's last ``SYNCNODE_PROGRESS`` line."""

    job: str
    phase: str
    done: int = 0
    total: int = 0
    step: int = 0  # this phase's place among the job's ``steps`` (0: the job does not say)
    steps: int = 0

    @property
    def fraction(self) -> float:
        """Of the whole job when it numbers its phases (each an equal share), else of this
        phase: the bar moves through the phases instead of sitting at 0% until the end."""
        within = min(self.done / self.total, 1.0) if self.total > 0 else 0.0
        if 0 < self.step <= self.steps:
            return round((self.step - 1 + within) / self.steps, 4)
        return round(within, 4)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fraction": self.fraction}


def parse_progress(job: str, payload: str) -> JobProgress | None:
    """The progress a line's JSON payload reports, or None if it is not one."""
    try:
        data = json.loads(payload)
        return JobProgress(job, str(data["phase"]), int(data["done"]), int(data["total"]),
                           int(data.get("step", 0)), int(data.get("steps", 0)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


async def run_job(job: JobCommand, *, timeout_s: float, env: dict[str, str] | None,
                  on_progress: Callable[[JobProgress], None], clock: Clock) -> dict[str, Any]:
    """Run ``job`` to its end (killed after ``timeout_s``); its outcome: ``job``, ``ok``,
    ``exit_code``, ``seconds``, ``result`` and, when it failed, ``error`` (and ``stderr``)."""
    result: dict[str, Any] | None = None
    stderr_tail: deque[str] = deque(maxlen=_STDERR_LINES)
    started = clock.now()
    try:
        proc = await trio.lowlevel.open_process(
            list(job.argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
    except OSError as exc:
        return {"job": job.name, "ok": False, "exit_code": None, "error": f"cannot start: {exc}"}

    def on_line(line: str) -> None:
        nonlocal result
        if line.startswith(PROGRESS_PREFIX):
            progress = parse_progress(job.name, line[len(PROGRESS_PREFIX):])
            if progress is not None:
                on_progress(progress)
        elif line.startswith(RESULT_PREFIX):
            try:
                result = json.loads(line[len(RESULT_PREFIX):])
            except ValueError:
                result = {"unparsed": line[len(RESULT_PREFIX):][:1000]}

    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_lines, proc.stderr, stderr_tail.append)
            with trio.move_on_after(timeout_s) as scope:
                await read_lines(proc.stdout, on_line)
                await proc.wait()
            timed_out = scope.cancelled_caught
            if timed_out:
                proc.kill()
                await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
    code = proc.returncode
    outcome: dict[str, Any] = {"job": job.name, "ok": code == 0 and not timed_out,
                               "exit_code": code, "seconds": round(clock.now() - started, 3),
                               "result": result}
    if timed_out:
        outcome["error"] = f"killed after {timeout_s} s"
    elif code != 0:
        outcome["error"] = f"exit status {code}"
        outcome["stderr"] = list(stderr_tail)
    return outcome


async def read_lines(stream: Any, sink: Callable[[str], None]) -> None:
    """Feed each line of ``stream`` to ``sink``; a line longer than 1 MiB is dropped."""
    if stream is None:
        return
    buf = b""
    async for chunk in stream:
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            sink(line.decode("utf-8", "replace").rstrip("\r"))
        if len(buf) > _MAX_LINE:
            buf = b""  # an endless line is noise; drop it rather than grow
    if buf:
        sink(buf.decode("utf-8", "replace"))
