"""The snapshot scheduler: runs Spark jobs as subprocesses, one at a time, and tracks them.

The daemon never runs Spark in its own process. A run is started by ``trigger()`` (the API), by
the interval (``snapshot_interval_s``) or after enough new events (``snapshot_every_events``,
counted through ``on_commit``). A run executes its jobs in order (the snapshot build, optionally
the rehash); each job is ``python -m spark_jobs.<job> ...`` whose stdout lines
``SYNCNODE_PROGRESS {json}`` update the progress and whose ``SYNCNODE_RESULT {json}`` line is kept
as its result. A job that fails, cannot start or hangs past its timeout is recorded as failed
(exit status, last lines of stderr) and the scheduler carries on: nothing escapes into the node.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from spark_jobs.source import PROGRESS_PREFIX, RESULT_PREFIX
from storage import AppendResult, EventRecord

__all__ = [
    "JobCommand",
    "SnapshotJobConfig",
    "SnapshotScheduler",
    "job_commands",
    "scheduler_from_config",
]

log = logging.getLogger("syncnode.snapshots")
_STDERR_LINES = 20
_MAX_LINE = 1 << 20


@dataclass(frozen=True)
class JobCommand:
    name: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class SnapshotJobConfig:
    """What the daemon's config says about Spark jobs (section ``[spark]``)."""

    db_url: str
    data_dir: str
    network_id: int
    snapshot_dir: str
    master: str = "local[*]"
    partitions: int = 8
    period_ms: int = 60_000
    settle_ms: int = 60_000
    rehash: bool = False
    driver_memory: str = "4g"
    max_events_per_file: int = 100_000
    event_id_layout: str = "cip124-draft"
    waku_channels: tuple[str, ...] = ()
    python: str = field(default_factory=lambda: sys.executable)


def job_commands(cfg: SnapshotJobConfig) -> list[JobCommand]:
    """The subprocess command lines of one scheduled run."""
    common = ("--db", cfg.db_url, "--network-id", str(cfg.network_id), "--master", cfg.master,
              "--partitions", str(cfg.partitions), "--driver-memory", cfg.driver_memory)
    jobs = [JobCommand("snapshot", (
        cfg.python, "-m", "spark_jobs.snapshot", *common, "--out", cfg.snapshot_dir,
        "--data-dir", cfg.data_dir, "--period-ms", str(cfg.period_ms),
        "--settle-ms", str(cfg.settle_ms), "--max-events-per-file", str(cfg.max_events_per_file),
    ))]
    if cfg.rehash:
        jobs.append(JobCommand("rehash", (cfg.python, "-m", "spark_jobs.rehash", *common,
                                          "--event-id-layout", cfg.event_id_layout,
                                          "--waku-channels", ",".join(cfg.waku_channels))))
    return jobs


def _now() -> float:
    return time.time()


class SnapshotScheduler:
    """``async run()`` in the daemon's nursery; ``trigger()``/``status()`` for the API."""

    def __init__(
        self,
        jobs: Sequence[JobCommand],
        *,
        interval_s: float = 0.0,
        every_events: int = 0,
        timeout_s: float = 6 * 3600.0,
        env: dict[str, str] | None = None,
        wall_clock: Callable[[], float] = _now,
    ) -> None:
        self.jobs = list(jobs)
        self.interval_s = interval_s
        self.every_events = every_events
        self.timeout_s = timeout_s
        self.env = env
        self._clock = wall_clock
        self._wake = trio.Event()
        self._pending: str | None = None
        self._new_events = 0
        self._running = False
        self._state: dict[str, Any] = {"state": "idle", "runs": 0, "failures": 0}
        self._progress: dict[str, Any] | None = None
        self._last: dict[str, Any] | None = None
        self._finished = trio.Event()

    # -- inputs ---------------------------------------------------------------------------

    def trigger(self, reason: str = "api") -> dict[str, Any]:
        """Ask for a run now; while one runs, the request is queued (once) for afterwards."""
        queued = self._running
        self._pending = reason
        self._wake.set()
        return {"accepted": True, "queued_after_current": queued, **self.status()}

    def on_commit(self, result: AppendResult, _records: Sequence[EventRecord]) -> None:
        """``EventStore.on_commit`` listener: counts new events toward ``every_events``."""
        self._new_events += len(result.inserted)
        if self.every_events and self._new_events >= self.every_events and not self._running:
            self._pending = self._pending or "events"
            self._wake.set()

    def status(self) -> dict[str, Any]:
        return {
            **self._state,
            "running": self._running,
            "progress": self._progress,
            "last": self._last,
            "new_events": self._new_events,
            "interval_s": self.interval_s,
            "every_events": self.every_events,
        }

    async def wait_finished(self) -> dict[str, Any] | None:
        """Wait for the current or next run to finish; returns its result (tests, CLI waits)."""
        await self._finished.wait()
        return self._last

    # -- the service ----------------------------------------------------------------------

    async def run(self) -> None:
        next_at = trio.current_time() + self.interval_s if self.interval_s > 0 else math.inf
        while True:
            with trio.move_on_at(next_at):
                await self._wake.wait()
            self._wake = trio.Event()
            reason = self._pending
            if reason is None and trio.current_time() >= next_at:
                reason = "interval"
            if reason is None:
                continue
            self._pending = None
            await self._run_once(reason)
            if self.every_events and self._new_events >= self.every_events:
                self._pending = self._pending or "events"
                self._wake.set()
            if self.interval_s > 0:
                next_at = trio.current_time() + self.interval_s

    async def _run_once(self, reason: str) -> None:
        self._running = True
        self._new_events = 0
        started = self._clock()
        self._state.update(state="running", reason=reason, started_at=started)
        results: list[dict[str, Any]] = []
        ok = True
        try:
            for job in self.jobs:
                outcome = await self._run_job(job)
                results.append(outcome)
                if not outcome["ok"]:
                    ok = False
                    break
        finally:
            self._running = False
            self._progress = None
            self._state["runs"] += 1
            if not ok:
                self._state["failures"] += 1
            self._state["state"] = "idle"
            self._last = {"ok": ok, "reason": reason, "started_at": started,
                          "finished_at": self._clock(),
                          "seconds": round(self._clock() - started, 3), "jobs": results}
            finished, self._finished = self._finished, trio.Event()
            finished.set()
        if ok:
            log.info("snapshot jobs finished (%s) in %.1f s", reason, self._last["seconds"])
        else:
            log.warning("snapshot job failed: %s", results[-1] if results else "?")

    async def _run_job(self, job: JobCommand) -> dict[str, Any]:
        self._progress = {"job": job.name, "phase": job.name, "done": 0, "total": 0,
                          "fraction": 0.0}
        result: dict[str, Any] | None = None
        stderr_tail: deque[str] = deque(maxlen=_STDERR_LINES)
        started = time.monotonic()
        try:
            proc = await trio.lowlevel.open_process(
                list(job.argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env
            )
        except OSError as exc:
            return {"job": job.name, "ok": False, "exit_code": None,
                    "error": f"cannot start: {exc}"}
        timed_out = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_lines, proc.stderr, stderr_tail.append)

                def on_line(line: str) -> None:
                    nonlocal result
                    if line.startswith(PROGRESS_PREFIX):
                        self._update_progress(job.name, line[len(PROGRESS_PREFIX):])
                    elif line.startswith(RESULT_PREFIX):
                        try:
                            result = json.loads(line[len(RESULT_PREFIX):])
                        except ValueError:
                            result = {"unparsed": line[len(RESULT_PREFIX):][:1000]}

                with trio.move_on_after(self.timeout_s) as scope:
                    await self._read_lines(proc.stdout, on_line)
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
                                   "exit_code": code,
                                   "seconds": round(time.monotonic() - started, 3),
                                   "result": result}
        if timed_out:
            outcome["error"] = f"killed after {self.timeout_s} s"
        elif code != 0:
            outcome["error"] = f"exit status {code}"
            outcome["stderr"] = list(stderr_tail)
        return outcome

    def _update_progress(self, job: str, payload: str) -> None:
        try:
            data = json.loads(payload)
            done, total = int(data["done"]), int(data["total"])
            phase = str(data["phase"])
        except (ValueError, KeyError, TypeError):
            return
        self._progress = {"job": job, "phase": phase, "done": done, "total": total,
                          "fraction": round(done / total, 4) if total > 0 else 0.0}

    @staticmethod
    async def _read_lines(stream: Any, sink: Callable[[str], None]) -> None:
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


def scheduler_from_config(runtime: Any) -> SnapshotScheduler | None:
    """The scheduler a node's ``[spark]`` config asks for, or None (section absent or disabled).

    Expects ``config.spark`` with ``enabled, master, partitions, snapshot_dir,
    snapshot_interval_s, snapshot_every_events, period_ms, settle_ms, rehash, job_timeout_s,
    driver_memory, max_events_per_file``.
    """
    from node.services import channel_profiles  # services imports this module

    config = runtime.config
    spark = getattr(config, "spark", None)
    if spark is None or not spark.enabled:
        return None
    snapshot_dir = spark.snapshot_dir or str(config.data_path / "snapshots")
    cfg = SnapshotJobConfig(
        db_url=config.database_url, data_dir=str(config.data_path),
        network_id=config.node.network_id, snapshot_dir=snapshot_dir, master=spark.master,
        partitions=spark.partitions, period_ms=spark.period_ms, settle_ms=spark.settle_ms,
        rehash=spark.rehash, driver_memory=spark.driver_memory,
        max_events_per_file=spark.max_events_per_file,
        event_id_layout=config.recon.event_id_layout,
        waku_channels=tuple(sorted(c for c, p in channel_profiles(config).items() if p == "waku")),
    )
    return SnapshotScheduler(
        job_commands(cfg), interval_s=spark.snapshot_interval_s,
        every_events=spark.snapshot_every_events, timeout_s=spark.job_timeout_s,
    )
