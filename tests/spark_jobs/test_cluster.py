"""The rehash job on a real standalone Spark cluster (master + worker on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from node.clock import SystemClock
from node.snapshots.job_process import JobCommand
from node.snapshots.scheduler import SnapshotJobConfig, SnapshotScheduler, job_commands
from spark_jobs import rehash
from spark_jobs.standalone import SPARK_HOME, standalone_cluster
from tests.spark_jobs.conftest import NETWORK_ID, run_triggered


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with one registered 2-core worker, started once
    for both tests (each job is its own Spark application; the cluster keeps no state between
    them that a result depends on)."""
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as url:
        yield url


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rehash_on_a_standalone_cluster_matches_local(
    spark: Any, cluster: str, template_db: Path, tmp_path: Path
) -> None:
    """The scheduler runs its rehash job (the command line of ``job_commands``, plus
    ``--report``) on the cluster: it reports success on all 480 events, and its report is
    local[2]'s. (This is also the scheduler's run of the real rehash job: one Spark
    application serves both checks; test_scheduler runs the real snapshot job.)"""
    url = f"sqlite:///{template_db}"
    local = rehash.run(spark, url, NETWORK_ID, partitions=3)
    report_file = tmp_path / "cluster.json"
    cfg = SnapshotJobConfig(db_url=url, data_dir=str(tmp_path), network_id=NETWORK_ID,
                            snapshot_dir=str(tmp_path / "snap"), master=cluster, partitions=3,
                            rehash=True)
    _snapshot, job = job_commands(cfg)
    assert job.name == "rehash"
    scheduler = SnapshotScheduler(
        [JobCommand(job.name, (*job.argv, "--report", str(report_file)))],
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME)}, clock=SystemClock())

    last = trio.run(run_triggered, scheduler, 480)
    assert last is not None and last["ok"], last
    (outcome,) = last["jobs"]
    # The job's last stdout line is its result: ok, over every event of the log.
    assert outcome["result"]["ok"] is True and outcome["result"]["events"] == 480
    on_cluster: dict[str, Any] = json.loads(report_file.read_text())
    on_cluster.pop("seconds")
    assert on_cluster == local and local["ok"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_snapshot_on_a_standalone_cluster_matches_local(
    spark: Any, cluster: str, template_db: Path, tmp_path: Path, node_key_file: Path
) -> None:
    """Executors of a real cluster write the files (the driver only signs): same snapshot,
    byte for byte, as local[2], with a 1 GiB driver and files split at 40 events."""
    from spark_jobs import snapshot
    from tests.spark_jobs.conftest import PERIOD_MS

    url = f"sqlite:///{template_db}"
    options = ["--period-ms", str(PERIOD_MS), "--all", "--max-events-per-file", "40"]
    snapshot.run(spark, url, tmp_path / "local", snapshot.load_node_key(node_key_file),
                 NETWORK_ID, period_ms=PERIOD_MS, include_open=True, partitions=3,
                 max_events_per_file=40)
    proc = subprocess.run(
        [sys.executable, "-m", "spark_jobs.snapshot", "--db", url, "--network-id",
         str(NETWORK_ID), "--master", cluster, "--partitions", "3", "--driver-memory", "1g",
         "--key", str(node_key_file), "--out", f"file://{tmp_path / 'cluster'}", *options],
        capture_output=True, text=True, timeout=480,
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    def tree(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file()}

    local = tree(tmp_path / "local")
    assert tree(tmp_path / "cluster") == local and len(local) > 40
