"""The snapshot scheduler: runs Spark jobs as subprocesses, one at a time, and tracks them.

The daemon never runs Spark in its own process. A run is started by ``trigger()`` (the API), by
the interval (``snapshot_interval_s``) or after enough new events (``snapshot_every_events``,
counted by :meth:`SnapshotScheduler.committed`, one of the store's commit observers). A run
executes its jobs in order (the snapshot build, optionally the rehash); each job is
``python -m spark_jobs.<job> ...`` whose stdout lines ``SYNCNODE_PROGRESS {json}`` update the
progress and whose ``SYNCNODE_RESULT {json}`` line is kept as its result. A job that fails,
cannot start or hangs past its timeout is recorded as failed (exit status, last lines of
stderr) and the scheduler carries on: nothing escapes into the node.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from node.clock import Clock
from node.config.channels import channel_profiles
from node.snapshots.job_process import JobCommand, JobProgress, run_job
from storage import AppendResult, EventRecord

if TYPE_CHECKING:
    from node.config.settings import Config

__all__ = [
    "RunState",
    "SnapshotJobConfig",
    "SnapshotScheduler",
    "job_commands",
    "scheduler_from_config",
]

log = logging.getLogger("syncnode.snapshots")


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
    driver_memory: str = "1g"
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


@dataclass
class RunState:
    """What the scheduler is doing and has done (``status()`` reports it)."""

    state: str = "idle"  # "idle" or "running"
    runs: int = 0
    failures: int = 0
    reason: str | None = None  # why the current or last run started; None before the first
    started_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        # Before the first run there is no reason nor start time to report.
        return {k: v for k, v in asdict(self).items() if v is not None}


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
        clock: Clock,
    ) -> None:
        self.jobs = list(jobs)
        self.interval_s = interval_s
        self.every_events = every_events
        self.timeout_s = timeout_s
        self.env = env
        self.clock = clock  # wall(): run times reported; now(): the interval
        self._wake = trio.Event()
        self._pending: str | None = None
        self._new_events = 0
        self._running = False
        self._state = RunState()
        self._progress: JobProgress | None = None
        self._last: dict[str, Any] | None = None
        self._finished = trio.Event()

    # -- inputs ---------------------------------------------------------------------------

    def trigger(self, reason: str = "api") -> dict[str, Any]:
        """Ask for a run now; while one runs, the request is queued (once) for afterwards.
        When nothing changed since the last good run, the answer says so at once and no job
        starts (``unchanged``)."""
        queued = self._running
        if not queued and self._pending is None and self._up_to_date():
            self._record_unchanged(reason)
            return {"accepted": True, "queued_after_current": False, "unchanged": True,
                    **self.status()}
        self._pending = reason
        self._wake.set()
        return {"accepted": True, "queued_after_current": queued, "unchanged": False,
                **self.status()}

    def _up_to_date(self) -> bool:
        """The last run succeeded, left no event out (settle window), no event was committed
        since it started, and its snapshot directory is still there: a new run would write
        nothing, so it is not worth starting Spark's JVM (issue 29)."""
        last = self._last
        if last is None or not last["ok"] or self._new_events:
            return False
        snapshots = [j.get("result") or {} for j in last["jobs"] if j["job"] == "snapshot"]
        return bool(snapshots) and all(
            r.get("pending_events") == 0 and Path(str(r.get("out", ""))).is_dir()
            for r in snapshots)

    def _record_unchanged(self, reason: str) -> None:
        assert self._last is not None
        now = self.clock.wall()
        built = self._last.get("built_at", self._last["finished_at"])
        self._last = {**self._last, "reason": reason, "started_at": now, "finished_at": now,
                      "seconds": 0.0, "unchanged": True, "built_at": built}
        self._state.runs += 1
        self._state.reason, self._state.started_at = reason, now
        finished, self._finished = self._finished, trio.Event()
        finished.set()
        log.info("snapshot up to date (%s): nothing new since %s", reason, built)

    def committed(self, result: AppendResult, _records: Sequence[EventRecord]) -> None:
        """A commit observer of the store (given at its construction): counts new events
        toward ``every_events``."""
        self._new_events += len(result.inserted)
        if self.every_events and self._new_events >= self.every_events and not self._running:
            self._pending = self._pending or "events"
            self._wake.set()

    def status(self) -> dict[str, Any]:
        return {
            **self._state.as_dict(),
            "running": self._running,
            "progress": self._progress.as_dict() if self._progress else None,
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
        next_at = self.clock.now() + self.interval_s if self.interval_s > 0 else math.inf
        while True:
            with trio.move_on_at(next_at):
                await self._wake.wait()
            self._wake = trio.Event()
            reason = self._pending
            if reason is None and self.clock.now() >= next_at:
                reason = "interval"
            if reason is None:
                continue
            self._pending = None
            await self._run_once(reason)
            if self.every_events and self._new_events >= self.every_events:
                self._pending = self._pending or "events"
                self._wake.set()
            if self.interval_s > 0:
                next_at = self.clock.now() + self.interval_s

    async def _run_once(self, reason: str) -> None:
        if self._up_to_date():  # the interval or a queued request, with nothing new
            self._record_unchanged(reason)
            return
        self._running = True
        self._new_events = 0
        started = self.clock.wall()
        self._state.state, self._state.reason, self._state.started_at = "running", reason, started
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
            self._state.runs += 1
            if not ok:
                self._state.failures += 1
            self._state.state = "idle"
            self._last = {"ok": ok, "reason": reason, "started_at": started,
                          "finished_at": self.clock.wall(), "unchanged": False,
                          "seconds": round(self.clock.wall() - started, 3), "jobs": results}
            finished, self._finished = self._finished, trio.Event()
            finished.set()
        if ok:
            log.info("snapshot jobs finished (%s) in %.1f s", reason, self._last["seconds"])
        else:
            log.warning("snapshot job failed: %s", results[-1] if results else "?")

    async def _run_job(self, job: JobCommand) -> dict[str, Any]:
        self._progress = JobProgress(job.name, f"{job.name}:starting")
        return await run_job(job, timeout_s=self.timeout_s, env=self.env,
                             on_progress=self._set_progress, clock=self.clock)

    def _set_progress(self, progress: JobProgress) -> None:
        self._progress = progress


def scheduler_from_config(config: Config, clock: Clock) -> SnapshotScheduler | None:
    """The scheduler a node's ``[spark]`` config asks for, or None when it is disabled."""
    spark = config.spark
    if not spark.enabled:
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
        every_events=spark.snapshot_every_events, timeout_s=spark.job_timeout_s, clock=clock,
    )
