"""Spark plumbing shared by the jobs: the session, the JDBC source, progress lines.

Nothing here runs at import time; ``pyspark`` itself is imported lazily so that the node (which
only launches jobs as subprocesses) never loads it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from storage import column_bounds, events, make_engine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DEFAULT_DRIVER_MEMORY",
    "JDBC_JARS",
    "PROGRESS_PREFIX",
    "RESULT_PREFIX",
    "JdbcSource",
    "StageTally",
    "build_session",
    "emit_progress",
    "jdbc_source",
    "read_events",
    "stage_progress",
]

JDBC_JARS = ("/usr/share/java/sqlite-jdbc.jar", "/usr/share/java/postgresql.jar")
#: A job's stdout line ``SYNCNODE_PROGRESS {json}`` tells the scheduler how far it got.
PROGRESS_PREFIX = "SYNCNODE_PROGRESS "
#: A job's last stdout line ``SYNCNODE_RESULT {json}`` is its summary, kept as the last result.
RESULT_PREFIX = "SYNCNODE_RESULT "


#: The jobs' default driver heap (Spark's own default): the driver receives per-file and
#: per-bucket metadata only, so it does not grow with the log (``[spark] driver_memory``).
DEFAULT_DRIVER_MEMORY = "1g"


def build_session(
    master: str = "local[*]",
    app_name: str = "syncnode",
    *,
    shuffle_partitions: int = 8,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """A session with the JDBC drivers on the class path and the UI off.

    Executors run this very interpreter (``PYSPARK_PYTHON``), which is what makes a local
    standalone cluster use the project's virtual environment.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jars = ",".join(j for j in JDBC_JARS if os.path.exists(j))
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.extraClassPath", jars.replace(",", os.pathsep))
        .config("spark.executor.extraClassPath", jars.replace(",", os.pathsep))
        .config("spark.jars", jars)
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@dataclass(frozen=True)
class JdbcSource:
    """How Spark reaches the node database: JDBC URL, driver class and connection properties."""

    url: str
    driver: str
    properties: dict[str, str]


def jdbc_source(sqlalchemy_url: str) -> JdbcSource:
    """The JDBC equivalent of a node's SQLAlchemy URL (SQLite file or PostgreSQL)."""
    parsed = make_url(sqlalchemy_url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError("a Spark job needs a SQLite file, not an in-memory database")
        return JdbcSource(
            f"jdbc:sqlite:{os.path.abspath(parsed.database)}",
            "org.sqlite.JDBC",
            {"open_mode": "1"},  # SQLITE_OPEN_READONLY: a job never writes the node's log
        )
    if backend == "postgresql":
        host = parsed.host or "localhost"
        port = parsed.port or 5432
        props = {"user": parsed.username or "", "password": str(parsed.password or "")}
        return JdbcSource(
            f"jdbc:postgresql://{host}:{port}/{parsed.database}", "org.postgresql.Driver", props
        )
    raise ValueError(f"unsupported database for Spark jobs: {backend}")


_LONG_SCHEMA = ", ".join(
    f"{c.name} LONG" for c in events.columns if c.name in ("seq", "lamport", "received_at")
    or c.name.startswith("lane")
)


def seq_bounds(sqlalchemy_url: str) -> tuple[int, int, int]:
    """(min seq, max seq, count) of the log, for the partitioned read."""
    engine = make_engine(sqlalchemy_url)
    try:
        with engine.connect() as conn:
            return column_bounds(conn, "seq")
    finally:
        engine.dispose()


def read_events(
    spark: SparkSession,
    sqlalchemy_url: str,
    columns: Sequence[str],
    *,
    partitions: int,
    where: str | None = None,
) -> DataFrame:
    """The events table through Spark's JDBC source, split into ``partitions`` ranges of seq.

    Column pruning and ``where`` (a Spark SQL predicate) are pushed down to the database.
    """
    source = jdbc_source(sqlalchemy_url)
    lo, hi, _count = seq_bounds(sqlalchemy_url)
    reader = (
        spark.read.format("jdbc")
        .option("url", source.url)
        .option("driver", source.driver)
        .option("dbtable", events.name)
        .option("partitionColumn", "seq")
        .option("lowerBound", str(lo))
        .option("upperBound", str(hi + 1))
        .option("numPartitions", str(max(1, partitions)))
        .option("fetchsize", "10000")
    )
    for key, value in source.properties.items():
        reader = reader.option(key, value)
    # sqlite-jdbc reports BIGINT columns as DECIMAL(20,0): read every integer as a long.
    reader = reader.option("customSchema", _LONG_SCHEMA)
    df = reader.load().select(*columns)
    if where:
        df = df.where(where)
    return df


def emit_progress(phase: str, done: int, total: int, **extra: Any) -> None:
    """One progress line on stdout (the scheduler reads them; people can too)."""
    line = {"phase": phase, "done": done, "total": total, **extra}
    print(PROGRESS_PREFIX + json.dumps(line, sort_keys=True), flush=True)


class StageTally:
    """Tasks done / tasks of every Spark stage a phase has run so far, reported only forward.

    A phase can run several stages one after another, and Spark names a stage only once it
    starts: counting the active stages alone went back from 1/1 to 0/1 when the next stage
    began, and the progress bar with it. A stage that left the active set counts as finished,
    and a tally whose share of done tasks would fall is not reported (the next stage's tasks
    join the total at once, so 1/1 is followed by 2/2, not 1/2)."""

    def __init__(self) -> None:
        self.stages: dict[int, tuple[int, int]] = {}
        self.last: tuple[int, int] | None = None

    def update(self, active: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
        """``active``: stage id -> (completed, tasks); the (done, total) to report, or None."""
        for stage, (_done, tasks) in self.stages.items():
            if stage not in active:
                self.stages[stage] = (tasks, tasks)
        self.stages.update(active)
        done = sum(d for d, _ in self.stages.values())
        total = sum(t for _, t in self.stages.values())
        if not total or (done, total) == self.last:
            return None
        if self.last is not None and done * self.last[1] < self.last[0] * total:
            return None
        self.last = (done, total)
        return self.last


@contextmanager
def stage_progress(spark: SparkSession, phase: str, interval_s: float = 1.0,
                   **extra: Any) -> Iterator[None]:
    """Report completed/total tasks of the phase's stages every ``interval_s`` while inside
    (``extra``: more fields of each line, e.g. ``step``/``steps``), never backwards
    (:class:`StageTally`)."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        tally = StageTally()
        while not stop.wait(interval_s):
            active = {}
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    active[stage_id] = (info.numCompletedTasks, info.numTasks)
            report = tally.update(active)
            if report is not None:
                emit_progress(phase, *report, **extra)

    thread = threading.Thread(target=poll, name=f"progress-{phase}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
