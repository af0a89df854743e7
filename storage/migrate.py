"""Apply Alembic migrations programmatically (``syncnode run`` does this at start-up)."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

__all__ = ["current_revision", "head_revision", "upgrade"]

_SCRIPTS = Path(__file__).resolve().parent / "migrations"
# Alembic's ``op`` and ``context`` are module-level proxies, one per process: two upgrades in
# two threads at once (several nodes started in one process) would run each other's operations
# on the wrong database. Upgrades take turns.
_UPGRADING = threading.Lock()


def _config() -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(_SCRIPTS))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to ``revision``; a no-op when it is already there."""
    cfg = _config()
    with _UPGRADING, engine.begin() as conn:
        _restamp_renamed(conn)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def _restamp_renamed(conn: Connection) -> None:
    """Revision 0007 (the change feed) first shipped under a longer id, ``0007_`` and a suffix;
    the ids are plain numbers now. A database stamped with the old id is the same schema:
    re-stamped, not migrated again (Alembic would stop at an id it does not know)."""
    if not inspect(conn).has_table("alembic_version"):
        return
    stamp = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    if isinstance(stamp, str) and stamp.startswith("0007_"):
        conn.execute(text("UPDATE alembic_version SET version_num = '0007'"))
