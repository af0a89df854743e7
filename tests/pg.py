"""PostgreSQL test databases: one reset used by every test package."""

from __future__ import annotations

from sqlalchemy import text

from storage import make_engine, metadata


def reset_postgres(url: str) -> None:
    """Drop every table of the schema, Alembic's version table and tables that later migrations
    dropped (no longer in ``metadata``) but an earlier test or run may have left behind."""
    engine = make_engine(url)
    with engine.begin() as conn:
        metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
        conn.execute(text("DROP TABLE IF EXISTS crdt_mempool"))
        conn.execute(text("DROP FUNCTION IF EXISTS recon_summary_stale() CASCADE"))  # 0006
    engine.dispose()
