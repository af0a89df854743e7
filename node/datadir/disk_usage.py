"""Bytes on disk of the node's database and snapshot directory, for ``GET /v1/status``.

Status is read often (``status --watch`` every two seconds), and a snapshot directory can hold
many thousand files: a walk is repeated at most every ``DiskUsage.max_age_s``.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

__all__ = ["DiskUsage", "tree_bytes"]


def tree_bytes(root: Path) -> int | None:
    """The sizes of the regular files under ``root`` added up; None when it does not exist."""
    if not root.is_dir():
        return None
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                continue  # removed while walking (a build's scratch files)
    return total


class DiskUsage:
    """Cached sizes of one node's database (SQLite files or ``pg_database_size``) and its
    snapshot directory. Its methods block: call them in a worker thread."""

    def __init__(self, engine: Engine, snapshot_dir: Path | None,
                 max_age_s: float = 30.0) -> None:
        self.engine = engine
        self.snapshot_dir = snapshot_dir
        self.max_age_s = max_age_s
        self._at = -float("inf")
        self._cached: dict[str, int | None] = {}

    def sizes(self, now: float) -> dict[str, int | None]:
        """The sizes, walked again when the cache is older than ``max_age_s`` at ``now`` (the
        node clock's ``now()``, read by the caller: this runs in a worker thread)."""
        if not 0 <= now - self._at < self.max_age_s:
            self._cached = {"database_bytes": self._database_bytes(),
                            "snapshot_bytes": tree_bytes(self.snapshot_dir)
                            if self.snapshot_dir is not None else None}
            self._at = now
        return dict(self._cached)

    def _database_bytes(self) -> int | None:
        if self.engine.dialect.name == "sqlite":
            database = self.engine.url.database
            if not database or database == ":memory:":
                return None
            # The database and its write-ahead log: what the node really occupies.
            sizes = [Path(f"{database}{s}") for s in ("", "-wal", "-shm")]
            return sum(p.stat().st_size for p in sizes if p.exists())
        if self.engine.dialect.name == "postgresql":
            try:
                with self.engine.connect() as conn:
                    value = conn.execute(text("SELECT pg_database_size(current_database())"))
                    return int(value.scalar_one())
            except SQLAlchemyError:
                return None  # a size is worth no failed status
        return None
