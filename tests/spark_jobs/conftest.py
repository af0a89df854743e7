"""Spark job fixtures: one local[2] session for the whole run, and logs of real signed events.

Every database test runs on SQLite and, when ``SYNCNODE_TEST_PG`` is set, on PostgreSQL too.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from sqlalchemy import select

from node.snapshots.scheduler import SnapshotScheduler
from node.snapshots.trust import LoadRules
from spark_jobs.source import build_session
from spark_jobs.testlog import LogSpec, build_log, test_key
from storage import LANE_COLUMNS, events, make_engine
from sync.identity import peer_id_of
from tests.pg import reset_postgres

PG_URL = os.environ.get("SYNCNODE_TEST_PG", "")
BACKENDS = ["sqlite", *(["postgresql"] if PG_URL else [])]
NETWORK_ID = 7
#: 480 events, one every 10 ms: 4.8 s of log, i.e. 5 record files of 1 s.
SPEC = LogSpec(events=480, keys=3, channels=("general", "blocks"), network_id=NETWORK_ID)
PERIOD_MS = 1000


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = build_session("local[2]", "syncnode-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite log of ``SPEC``, built once and copied by the tests that need it."""
    path = tmp_path_factory.mktemp("template") / "log.db"
    build_log(f"sqlite:///{path}", SPEC, processes=1)
    engine = make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


_COMPARED = ("recon_key", "message_id", "channel", "sender", "lamport", "wire", *LANE_COLUMNS)


def shared_log(url: str) -> list[tuple[Any, ...]]:
    """The log as a node shares it: everything but the local seq and receive time."""
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(*(events.c[c] for c in _COMPARED))
                            .order_by(events.c.recon_key)).all()
    engine.dispose()
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]


def fresh_db(backend: str, tmp_path: Path, template: Path | None, name: str = "node.db") -> str:
    """An empty (``template`` None) or template-filled database on ``backend``."""
    if backend == "sqlite":
        path = tmp_path / name
        if template is not None:
            shutil.copyfile(template, path)
            return f"sqlite:///{path}"
        url = f"sqlite:///{path}"
        from storage import upgrade

        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        return url
    reset_postgres(PG_URL)
    if template is not None:
        build_log(PG_URL, SPEC, processes=1)
    else:
        from storage import upgrade

        engine = make_engine(PG_URL)
        upgrade(engine)
        engine.dispose()
    return PG_URL


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def log_url(backend: str, tmp_path: Path, template_db: Path) -> str:
    """A database holding the ``SPEC`` log."""
    return fresh_db(backend, tmp_path, template_db)


@pytest.fixture
def node_key_file(tmp_path: Path) -> Path:
    path = tmp_path / "identity.key"
    key = test_key("snapshot-node", 0)
    path.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    return path


def snapshot_rules() -> LoadRules:
    """What a node trusts when it loads the snapshots of these tests: their signer's key (the
    node key of ``node_key_file`` and the plain writer's), this log's channels, now."""
    return LoadRules.open([peer_id_of(test_key("snapshot-node", 0))], SPEC.channels,
                          time.time())


async def run_triggered(scheduler: SnapshotScheduler, timeout_s: float) -> dict[str, Any] | None:
    """One run of ``scheduler``'s jobs, started by hand (``trigger``), as the API starts one:
    its outcome, or ``TooSlowError`` after ``timeout_s``."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scheduler.run)
        with trio.fail_after(timeout_s):
            scheduler.trigger()
            last = await scheduler.wait_finished()
        nursery.cancel_scope.cancel()
    return last
