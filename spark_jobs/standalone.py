"""A standalone Spark cluster (master + workers) on 127.0.0.1, for tests and benchmarks.

Started from the pyspark package's own ``bin/spark-class`` (no separate Spark install); every
process logs into ``log_dir`` and is stopped on exit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["SPARK_HOME", "free_port", "standalone_cluster"]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


SPARK_HOME = _spark_home()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float,
              count: int = 1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited: {path.read_text(errors='replace')[-2000:]}")
        if path.read_text(errors="replace").count(text) >= count:
            return
        time.sleep(0.1)  # a few reads of a short log file: each wait ends near its line
    raise TimeoutError(f"{text!r} not seen {count} times in {path}")


@contextmanager
def standalone_cluster(log_dir: Path, *, workers: int = 1, cores: int = 2,
                       memory: str = "1g", timeout: float = 120) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with ``workers`` registered workers."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(log_dir),
           "SPARK_WORKER_DIR": str(log_dir / "work")}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    master_log = log_dir / "master.log"
    try:
        with master_log.open("wb") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=env))
        _wait_for(master_log, "I have been elected leader", procs[0], timeout)
        for n in range(workers):
            with (log_dir / f"worker{n}.log").open("wb") as out:
                procs.append(subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host",
                     "127.0.0.1", "--cores", str(cores), "--memory", memory,
                     "--webui-port", str(free_port())],
                    stdout=out, stderr=subprocess.STDOUT, env=env))
        _wait_for(master_log, "Registering worker", procs[0], timeout, count=workers)
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
