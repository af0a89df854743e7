"""The scheduled Spark jobs on a real standalone Spark cluster (master + worker on 127.0.0.1)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from node.clock import SystemClock
from node.snapshots.job_process import JobCommand
from node.snapshots.scheduler import SnapshotJobConfig, SnapshotScheduler, job_commands
from spark_jobs import rehash, snapshot
from spark_jobs.standalone import SPARK_HOME, standalone_cluster
from sync.recordstream import verify_tree
from sync.snapshot_manifest import MANIFEST_NAME, Manifest
from tests.spark_jobs.conftest import NETWORK_ID, PERIOD_MS, run_triggered

#: Record files split at 40 events: the log's 5 periods fill 14 files, so the
#: executors write many files of one period.
MAX_EVENTS_PER_FILE = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with one registered 2-core worker."""
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as url:
        yield url


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file()}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_scheduled_jobs_on_a_standalone_cluster_match_local(
    spark: Any, cluster: str, template_db: Path, tmp_path: Path, node_key_file: Path
) -> None:
    """The scheduler runs its real jobs, the command lines of ``job_commands`` (the rehash's
    plus ``--report``), on the cluster with a 1 GiB driver, and reports both results. The
    snapshot, written by the cluster's executors (the driver only signs), is local[2]'s byte
    for byte and verifies; the rehash reports success on all 480 events, and its report is
    local[2]'s. Each job is a Spark application of its own (seconds of JVM start), so this one
    run is also the scheduler's run of the real jobs."""
    url = f"sqlite:///{template_db}"
    cfg = SnapshotJobConfig(db_url=url, data_dir=str(node_key_file.parent),
                            network_id=NETWORK_ID, snapshot_dir=str(tmp_path / "cluster"),
                            master=cluster, partitions=3, period_ms=PERIOD_MS, settle_ms=0,
                            rehash=True, driver_memory="1g",
                            max_events_per_file=MAX_EVENTS_PER_FILE)
    snap_job, rehash_job = job_commands(cfg)
    assert (snap_job.name, rehash_job.name) == ("snapshot", "rehash")
    report_file = tmp_path / "rehash.json"
    scheduler = SnapshotScheduler(
        [snap_job, JobCommand(rehash_job.name, (*rehash_job.argv, "--report", str(report_file)))],
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME)}, clock=SystemClock())

    last = trio.run(run_triggered, scheduler, 540)
    assert last is not None and last["ok"], last
    snap_outcome, rehash_outcome = last["jobs"]

    # The template log is old and quiet: by the wall clock every period has settled.
    local = snapshot.run(spark, url, tmp_path / "local", snapshot.load_node_key(node_key_file),
                         NETWORK_ID, period_ms=PERIOD_MS, settle_ms=0, partitions=3,
                         max_events_per_file=MAX_EVENTS_PER_FILE)
    assert local["new_files"] == 14 and local["pending_events"] == 0
    assert snap_outcome["result"]["new_files"] == 14
    assert snap_outcome["result"]["pending_events"] == 0
    on_cluster, on_local = _tree(tmp_path / "cluster"), _tree(tmp_path / "local")
    # The chain's last period is the last one settled by each build's own clock (the local
    # build ran later); all else, every record file included, is the same bytes.
    cluster_manifest, local_manifest = (Manifest.from_json(t.pop(MANIFEST_NAME))
                                        for t in (on_cluster, on_local))
    assert cluster_manifest.chain.last_period <= local_manifest.chain.last_period
    assert replace(cluster_manifest, chain=replace(
        cluster_manifest.chain, last_period=local_manifest.chain.last_period)) == local_manifest
    assert on_cluster == on_local
    assert verify_tree({k: v for k, v in on_cluster.items() if ".rcd" in k}, None).ok

    # The job's last stdout line is its result: ok, over every event of the log.
    assert rehash_outcome["result"]["ok"] is True and rehash_outcome["result"]["events"] == 480
    report: dict[str, Any] = json.loads(report_file.read_text())
    report.pop("seconds")
    local_report = rehash.run(spark, url, NETWORK_ID, partitions=3)
    assert report == local_report and local_report["ok"]
