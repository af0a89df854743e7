"""SQLite's page cache per connection (``make_engine(sqlite_cache_mib=...)``): the ingest
workers' writer connection gets ``storage.sqlite_writer_cache_mib`` (default 32 MiB), every
other connection keeps SQLite's default."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.config.settings import Config
from node.store.worker import AppendRequest, _Writer
from storage import make_engine, upgrade
from tests.storage.conftest import make_record


def _cache_kib(engine: object) -> int:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        return -int(conn.exec_driver_sql("PRAGMA cache_size").scalar_one())


def test_every_connection_of_the_engine_gets_the_cache(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'node.db'}"
    sized, plain = make_engine(url, sqlite_cache_mib=48), make_engine(url)
    assert _cache_kib(sized) == 48 * 1024
    assert _cache_kib(plain) == 2000  # SQLite's default (-2000: 2,000 KiB)
    # A second connection open at the same time has it too.
    with sized.connect() as first:
        assert _cache_kib(sized) == 48 * 1024
        first.exec_driver_sql("SELECT 1")
    with pytest.raises(ValueError, match="sqlite_cache_mib"):
        make_engine(url, sqlite_cache_mib=-1)


def test_the_worker_writer_opens_its_connection_with_the_configured_cache(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'node.db'}"
    upgrade(make_engine(url))
    default = Config().storage.sqlite_writer_cache_mib
    assert default == 32
    records = [make_record(i) for i in range(3)]
    request = AppendRequest(url, "NORMAL", 5, [r.recon_key for r in records],
                            [r.message_id for r in records], [r.channel for r in records],
                            [r.sender for r in records], [r.lamport for r in records],
                            [r.wire for r in records], [r.lanes or () for r in records], default)
    writer = _Writer()
    result, errors = writer.append(request)
    assert errors == {} and len(result.inserted) == 3
    (engine,) = writer._engines.values()
    assert _cache_kib(engine) == default * 1024
