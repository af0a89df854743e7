"""Engine creation with per-dialect settings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

__all__ = ["make_engine", "redacted_url", "write_transaction"]


def redacted_url(url: str) -> str:
    """The URL with any password hidden, safe to print and to return from the status API."""
    return make_url(url).render_as_string(hide_password=True)


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: on SQLite it takes the write lock when it begins."""
    with engine.connect() as conn:
        conn.execution_options(sqlite_immediate=True)
        with conn.begin():
            yield conn


def make_engine(url: str, *, sqlite_synchronous: str = "FULL") -> Engine:
    """Create an engine; for SQLite: WAL, foreign keys on, the configured synchronous level."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if sqlite_synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"sqlite_synchronous must be NORMAL or FULL, got {sqlite_synchronous}")
        engine = create_engine(parsed, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # pysqlite's own transaction handling would defer BEGIN past our PRAGMAs;
            # autocommit here, then SQLAlchemy's "begin" listener below emits BEGIN itself.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA synchronous={sqlite_synchronous}")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # A deferred transaction that reads, then writes, fails at once with "database is
            # locked" when another writer committed in between; writers take the lock upfront.
            immediate = conn.get_execution_options().get("sqlite_immediate", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return create_engine(parsed, pool_pre_ping=True)
    return create_engine(parsed)
