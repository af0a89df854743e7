"""Engine creation with per-dialect settings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

__all__ = ["make_engine", "redacted_url", "weaker_level", "write_transaction"]


def redacted_url(url: str) -> str:
    """The URL with any password hidden, safe to print and to return from the status API."""
    return make_url(url).render_as_string(hide_password=True)


@contextmanager
def write_transaction(engine: Engine, *, durable: bool = True) -> Iterator[Connection]:
    """A transaction that will write: on SQLite it takes the write lock when it begins.

    ``durable=False`` (events relayed from peers, which can be fetched again) commits with
    the engine's relayed level: SQLite ``PRAGMA synchronous`` of ``make_engine``'s
    ``relayed_synchronous``, PostgreSQL ``SET LOCAL synchronous_commit = off`` when that level
    is NORMAL (docs/node.md, "Durability contract").
    """
    with engine.connect() as conn:
        conn.execution_options(sqlite_immediate=True, durable=durable)
        with conn.begin():
            yield conn


def weaker_level(a: str, b: str) -> str:
    """The weaker of two synchronous levels (NORMAL or FULL)."""
    return "NORMAL" if "NORMAL" in (a, b) else "FULL"


def make_engine(url: str, *, sqlite_synchronous: str = "FULL",
                relayed_synchronous: str | None = None, sqlite_cache_mib: int = 0) -> Engine:
    """Create an engine; for SQLite: WAL, foreign keys on, the configured synchronous level.

    ``relayed_synchronous`` (NORMAL or FULL; default: ``sqlite_synchronous``) is the level of
    ``write_transaction(..., durable=False)``; it is never stronger than ``sqlite_synchronous``.
    ``sqlite_cache_mib``: the page cache of each connection, at most (0: SQLite's 2 MiB). An
    append touches a random leaf of the ``message_id`` index per event; once the index
    outgrows the cache each is read again (``storage.sqlite_writer_cache_mib``).
    """
    if sqlite_cache_mib < 0:
        raise ValueError("sqlite_cache_mib must be >= 0")
    parsed = make_url(url)
    for name, level in (("sqlite_synchronous", sqlite_synchronous),
                        ("relayed_synchronous", relayed_synchronous or sqlite_synchronous)):
        if level not in ("NORMAL", "FULL"):
            raise ValueError(f"{name} must be NORMAL or FULL, got {level}")
    relayed = weaker_level(sqlite_synchronous, relayed_synchronous or sqlite_synchronous)
    if parsed.get_backend_name() == "sqlite":
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
            if sqlite_cache_mib:
                cur.execute(f"PRAGMA cache_size=-{sqlite_cache_mib * 1024}")  # in KiB
            cur.close()
            _record.info["synchronous"] = sqlite_synchronous

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # A deferred transaction that reads, then writes, fails at once with "database is
            # locked" when another writer committed in between; writers take the lock upfront.
            options = conn.get_execution_options()
            # Per transaction, before BEGIN (the level applies to this connection's commits).
            # In WAL mode a FULL commit syncs the whole WAL up to it, relayed frames before it
            # included, so a NORMAL commit never weakens an earlier or later FULL one.
            level = sqlite_synchronous if options.get("durable", True) else relayed
            info = conn.connection.info
            if info.get("synchronous") != level:
                conn.connection.driver_connection.execute(f"PRAGMA synchronous={level}")
                info["synchronous"] = level
            immediate = options.get("sqlite_immediate", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        engine = create_engine(parsed, pool_pre_ping=True)
        if relayed == "NORMAL":
            @event.listens_for(engine, "begin")
            def _on_pg_begin(conn: Any) -> None:
                # A relayed batch may be lost by a server crash just after its commit (it is
                # fetched again), never half-written: the WAL flush of later commits still
                # orders it. Own events keep synchronous_commit's server setting.
                if not conn.get_execution_options().get("durable", True):
                    conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
        return engine
    return create_engine(parsed)
