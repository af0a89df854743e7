"""The rehash job on a real standalone Spark cluster (master + worker on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from spark_jobs import rehash
from tests.spark_jobs.conftest import NETWORK_ID

SPARK_HOME = Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited: {path.read_text(errors='replace')[-2000:]}")
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise TimeoutError(f"{text!r} not seen in {path}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with one registered 2-core worker."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(tmp_path),
           "SPARK_WORKER_DIR": str(tmp_path / "work")}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    try:
        with master_log.open("wb") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(_free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=env))
        _wait_for(master_log, "I have been elected leader", procs[0], 120)
        with worker_log.open("wb") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--cores", "2", "--memory", "1g", "--webui-port", str(_free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=env))
        _wait_for(master_log, "Registering worker", procs[0], 120)
        yield url
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rehash_on_a_standalone_cluster_matches_local(
    spark: Any, cluster: str, template_db: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{template_db}"
    local = rehash.run(spark, url, NETWORK_ID, partitions=3)
    report_file = tmp_path / "cluster.json"
    proc = subprocess.run(
        [sys.executable, "-m", "spark_jobs.rehash", "--db", url, "--network-id", str(NETWORK_ID),
         "--master", cluster, "--partitions", "3", "--report", str(report_file)],
        capture_output=True, text=True, timeout=480,
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    on_cluster: dict[str, Any] = json.loads(report_file.read_text())
    on_cluster.pop("seconds")
    assert on_cluster == local and local["ok"]
    assert '"ok": true' in proc.stdout.splitlines()[-1]
