"""The database and snapshot sizes ``GET /v1/status`` reports (``node.datadir.disk_usage``), on
SQLite and, with SYNCNODE_TEST_PG, PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from node.datadir.disk_usage import DiskUsage, tree_bytes


def test_database_and_snapshot_bytes(engine: Engine, tmp_path: Path) -> None:
    snapshots = tmp_path / "snapshots"
    usage = DiskUsage(engine, snapshots, max_age_s=0.0)
    first = usage.sizes(0.0)
    assert first["database_bytes"] is not None and first["database_bytes"] > 0
    assert first["snapshot_bytes"] is None  # no snapshot written yet
    (snapshots / "record0").mkdir(parents=True)
    (snapshots / "record0" / "a.rcd.gz").write_bytes(b"x" * 1000)
    (snapshots / "manifest.json").write_bytes(b"{}")
    assert usage.sizes(0.0)["snapshot_bytes"] == 1002 == tree_bytes(snapshots)
    # Cached between walks: a status read every two seconds does not walk every time.
    cached = DiskUsage(engine, snapshots, max_age_s=3600.0)
    assert cached.sizes(0.0)["snapshot_bytes"] == 1002
    (snapshots / "more").write_bytes(b"y" * 10)
    assert cached.sizes(3599.0)["snapshot_bytes"] == 1002
    assert cached.sizes(3600.0)["snapshot_bytes"] == 1012  # walked again once max_age_s passed
    assert DiskUsage(engine, None).sizes(0.0)["snapshot_bytes"] is None
