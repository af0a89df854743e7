"""Repository functions for the node's key/value state table."""

from __future__ import annotations

from sqlalchemy import Connection, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from storage.schema import node_state

__all__ = [
    "count_state",
    "delete_oldest_state",
    "delete_state",
    "delete_state_before",
    "get_state",
    "list_state",
    "put_state",
]


def get_state(conn: Connection, key: str) -> bytes | None:
    row = conn.execute(select(node_state.c.value).where(node_state.c.key == key)).first()
    return None if row is None else bytes(row[0])


def put_state(conn: Connection, key: str, value: bytes, now_ms: int) -> None:
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = insert(node_state).values(key=key, value=value, updated_at=now_ms)
    stmt = stmt.on_conflict_do_update(
        index_elements=[node_state.c.key],
        set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at},
    )
    conn.execute(stmt)


def delete_state(conn: Connection, key: str) -> None:
    conn.execute(delete(node_state).where(node_state.c.key == key))


def list_state(conn: Connection, prefix: str) -> dict[str, bytes]:
    stmt = select(node_state.c.key, node_state.c.value).where(
        node_state.c.key.startswith(prefix, autoescape=True)
    )
    return {str(k): bytes(v) for k, v in conn.execute(stmt)}


def delete_state_before(conn: Connection, prefix: str, before_ms: int) -> int:
    """Delete entries under ``prefix`` last written before ``before_ms``; how many went."""
    stmt = delete(node_state).where(
        node_state.c.key.startswith(prefix, autoescape=True), node_state.c.updated_at < before_ms
    )
    return int(conn.execute(stmt).rowcount or 0)


def count_state(conn: Connection, prefix: str) -> int:
    stmt = select(func.count()).select_from(node_state).where(
        node_state.c.key.startswith(prefix, autoescape=True)
    )
    return int(conn.execute(stmt).scalar_one())


def delete_oldest_state(conn: Connection, prefix: str, count: int) -> int:
    """Delete the ``count`` entries under ``prefix`` written longest ago (ties: by key); how many
    went."""
    if count <= 0:
        return 0
    oldest = (
        select(node_state.c.key)
        .where(node_state.c.key.startswith(prefix, autoescape=True))
        .order_by(node_state.c.updated_at, node_state.c.key)
        .limit(count)
    )
    keys = [str(k) for k in conn.execute(oldest).scalars()]
    if not keys:
        return 0
    return int(conn.execute(delete(node_state).where(node_state.c.key.in_(keys))).rowcount or 0)
