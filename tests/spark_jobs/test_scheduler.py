"""The snapshot scheduler, its API routes and the CLI's progress display (no running node)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from node.api.app import ApiError
from node.cli.snapshot import progress_bar
from node.clock import SystemClock, TrioWallClock
from node.snapshots.job_process import JobCommand
from node.snapshots.routes import SNAPSHOT_ROUTES
from node.snapshots.scheduler import SnapshotJobConfig, SnapshotScheduler, job_commands
from spark_jobs.source import PROGRESS_PREFIX, RESULT_PREFIX
from storage import AppendResult

_SCRIPT = f"""
import json, sys, time
for i in range(4):
    print({PROGRESS_PREFIX!r} + json.dumps({{"phase": "p", "done": i, "total": 4}}), flush=True)
    time.sleep(float(sys.argv[1]))
print("noise", flush=True)
print({RESULT_PREFIX!r} + json.dumps({{"job": "fake", "events": 12}}), flush=True)
sys.exit(int(sys.argv[2]))
"""


def _job(delay: float = 0.0, code: int = 0, name: str = "fake") -> JobCommand:
    return JobCommand(name, (sys.executable, "-c", _SCRIPT, str(delay), str(code)))


def _failing() -> JobCommand:
    return JobCommand("broken", (sys.executable, "-c",
                                 "import sys; print('boom', file=sys.stderr); sys.exit(3)"))


@pytest.mark.trio
async def test_trigger_runs_jobs_and_tracks_progress() -> None:
    scheduler = SnapshotScheduler([_job(0.15), _job(name="second")], clock=SystemClock())
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run)
        answer = scheduler.trigger("test")
        assert answer["accepted"] and not answer["queued_after_current"]
        with trio.fail_after(60):
            while scheduler.status()["last"] is None:
                if (progress := scheduler.status()["progress"]) is not None:
                    seen.append(progress)
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    last = scheduler.status()["last"]
    assert last["ok"] and last["reason"] == "test"
    assert [j["job"] for j in last["jobs"]] == ["fake", "second"]
    assert last["jobs"][0]["result"] == {"job": "fake", "events": 12}
    assert any(p["phase"] == "p" and 0 < p["fraction"] < 1 for p in seen)
    assert scheduler.status()["runs"] == 1 and not scheduler.status()["running"]


@pytest.mark.trio
async def test_failures_are_recorded_and_the_scheduler_carries_on() -> None:
    scheduler = SnapshotScheduler([_failing(), _job()], clock=SystemClock())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run)
        with trio.fail_after(60):
            scheduler.trigger()
            first = await scheduler.wait_finished()
            scheduler.jobs = [JobCommand("missing", ("/nonexistent/python", "-m", "x"))]
            scheduler.trigger()
            second = await scheduler.wait_finished()
            scheduler.jobs = [_job()]
            scheduler.trigger()
            third = await scheduler.wait_finished()
        nursery.cancel_scope.cancel()
    assert first is not None and not first["ok"]
    assert [j["job"] for j in first["jobs"]] == ["broken"]  # later jobs of the run skipped
    assert first["jobs"][0]["exit_code"] == 3 and first["jobs"][0]["stderr"] == ["boom"]
    assert second is not None and "cannot start" in second["jobs"][0]["error"]
    assert third is not None and third["ok"]
    assert scheduler.status()["failures"] == 2 and scheduler.status()["runs"] == 3


@pytest.mark.trio
async def test_new_events_and_interval_start_runs() -> None:
    scheduler = SnapshotScheduler([_job()], every_events=100, interval_s=0.3, clock=SystemClock())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run)
        with trio.fail_after(60):
            scheduler.committed(AppendResult(tuple((i, f"m{i}") for i in range(60)), ()), [])
            await trio.sleep(0.1)
            assert scheduler.status()["runs"] == 0 and scheduler.status()["new_events"] == 60
            scheduler.committed(AppendResult(tuple((i, f"n{i}") for i in range(40)), ()), [])
            by_events = await scheduler.wait_finished()
            by_interval = await scheduler.wait_finished()
        nursery.cancel_scope.cancel()
    assert by_events is not None and by_events["reason"] == "events"
    assert by_interval is not None and by_interval["reason"] == "interval"


def test_hourly_runs_on_the_mock_clock() -> None:
    """``interval_s`` counts on the scheduler's clock, and the run times it reports are that
    clock's wall time: three hourly runs pass in an instant of real time."""
    t0 = 1_700_000_000.0

    async def main() -> list[dict[str, Any] | None]:
        scheduler = SnapshotScheduler([], interval_s=3600.0, clock=TrioWallClock(t0))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(scheduler.run)
            runs = [await scheduler.wait_finished() for _ in range(3)]
            nursery.cancel_scope.cancel()
        return runs

    runs = trio.run(main, clock=MockClock(autojump_threshold=0))
    assert [(r or {}).get("reason") for r in runs] == ["interval"] * 3
    assert [(r or {}).get("started_at") for r in runs] == [t0 + 3600, t0 + 7200, t0 + 10800]


@pytest.mark.trio
async def test_a_hung_job_is_killed_after_its_timeout() -> None:
    from tests.spark_jobs.conftest import run_triggered

    scheduler = SnapshotScheduler([_job(delay=30)], timeout_s=0.5, clock=SystemClock())
    last = await run_triggered(scheduler, 30)
    assert last is not None and not last["ok"] and "killed" in last["jobs"][0]["error"]


@pytest.mark.trio
async def test_routes_trigger_and_report() -> None:
    scheduler = SnapshotScheduler([_job()], clock=SystemClock())
    post, get = SNAPSHOT_ROUTES
    assert (post.method, post.path, get.method, get.path) == (
        "POST", "/v1/snapshots", "GET", "/v1/snapshots/status")
    node = SimpleNamespace(snapshots=scheduler)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run)
        response = await post.handler(node, None)  # type: ignore[arg-type]
        assert response.status_code == 202
        with trio.fail_after(60):
            await scheduler.wait_finished()
        status = json.loads(bytes((await get.handler(node, None)).body))  # type: ignore[arg-type]
        nursery.cancel_scope.cancel()
    assert status["last"]["ok"] and status["runs"] == 1
    with pytest.raises(ApiError) as err:
        await get.handler(SimpleNamespace(snapshots=None), None)  # type: ignore[arg-type]
    assert err.value.status == 503


def test_progress_bar() -> None:
    assert progress_bar(None) == "idle"
    bar = progress_bar({"phase": "snapshot:write", "done": 9, "total": 20, "fraction": 0.45},
                       width=20)
    assert bar == "[#########...........]  45%  snapshot:write 9/20"


def test_job_commands(tmp_path: Path) -> None:
    cfg = SnapshotJobConfig(db_url="sqlite:///x.db", data_dir=str(tmp_path), network_id=3,
                            snapshot_dir=str(tmp_path / "s"), master="spark://h:7077",
                            rehash=True)
    snap, rehash = job_commands(cfg)
    assert snap.argv[1:3] == ("-m", "spark_jobs.snapshot")
    assert rehash.argv[1:3] == ("-m", "spark_jobs.rehash")
    assert "spark://h:7077" in snap.argv and "--data-dir" in snap.argv
    from spark_jobs.snapshot import parse_args

    parsed = parse_args(snap.argv[3:])  # the job accepts every option the scheduler passes
    assert parsed.max_events_per_file == cfg.max_events_per_file == 100_000


def test_scheduler_from_config(tmp_path: Path) -> None:
    from node.config.settings import load_config
    from node.snapshots.scheduler import scheduler_from_config

    disabled = load_config(overrides={"node.data_dir": str(tmp_path), "spark.enabled": False})
    assert scheduler_from_config(disabled, SystemClock()) is None
    config = load_config(overrides={
        "node.data_dir": str(tmp_path), "spark.master": "local[2]",
        "spark.snapshot_interval_s": 3600.0, "spark.snapshot_every_events": 10_000,
    })
    scheduler = scheduler_from_config(config, SystemClock())
    assert scheduler is not None
    assert scheduler.interval_s == 3600.0 and scheduler.every_events == 10_000
    (job,) = scheduler.jobs
    assert str(tmp_path / "snapshots") in job.argv and "local[2]" in job.argv


def test_progress_of_a_job_that_numbers_its_phases() -> None:
    from node.snapshots.job_process import JobProgress, parse_progress

    # Step 2 of 6 half done: (1 + 0.5) / 6 of the whole job, not 50% nor 0%.
    progress = parse_progress("snapshot", json.dumps(
        {"phase": "snapshot:encode", "done": 2, "total": 4, "step": 2, "steps": 6}))
    assert progress == JobProgress("snapshot", "snapshot:encode", 2, 4, 2, 6)
    assert progress.fraction == 0.25
    assert JobProgress("snapshot", "snapshot:plan", 0, 1, 1, 6).fraction == 0.0
    assert JobProgress("snapshot", "snapshot:done", 1, 1, 6, 6).fraction == 1.0
    assert JobProgress("x", "p", 3, 4).fraction == 0.75  # a job without steps: the phase's
    bar = progress_bar(progress.as_dict(), width=12)
    assert bar == "[###.........]  25%  snapshot:encode (step 2 of 6) 2/4"
    assert parse_progress("x", '{"phase": "p", "done": 1, "total": 2, "step": "z"}') is None
