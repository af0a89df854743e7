"""Repository functions for block streams: completed blocks, the head and the change log.

The blocks application (``node.apps.blocks_app``) calls the writers inside the transaction that
advances its log cursor, so these tables always match a prefix of the event log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from storage.schema import block_head, block_log, blocks

__all__ = [
    "BlockChange",
    "BlockHead",
    "BlockRow",
    "block_at",
    "block_by_hash",
    "get_head",
    "last_change_seq",
    "log_changes",
    "put_head",
    "read_changes",
    "set_canonical",
    "store_blocks",
]


@dataclass(frozen=True, slots=True)
class BlockRow:
    hash: bytes
    number: int
    parent: bytes
    weight: int
    canonical: bool
    payload: str  # JSON text, the JSONL format of docs/cardinal.md
    applied_at: int


@dataclass(frozen=True, slots=True)
class BlockHead:
    hash: bytes
    number: int
    weight: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class BlockChange:
    seq: int
    kind: str  # "applied" or "reverted"
    hash: bytes
    number: int
    at: int


def _insert(conn: Connection) -> type[postgresql.Insert] | type[sqlite.Insert]:
    return postgresql.Insert if conn.dialect.name == "postgresql" else sqlite.Insert


def store_blocks(conn: Connection, stream: str, rows: Sequence[BlockRow]) -> None:
    """Insert or replace blocks (applied ones, or reverted within the same batch)."""
    if not rows:
        return
    stmt = _insert(conn)(blocks)
    stmt = stmt.on_conflict_do_update(
        index_elements=[blocks.c.stream, blocks.c.hash],
        set_={"canonical": stmt.excluded.canonical, "payload": stmt.excluded.payload,
              "applied_at": stmt.excluded.applied_at},
    )
    conn.execute(stmt, [
        {"stream": stream, "hash": r.hash, "number": r.number, "parent": r.parent,
         "weight": str(r.weight), "canonical": r.canonical, "payload": r.payload,
         "applied_at": r.applied_at}
        for r in rows
    ])


def set_canonical(conn: Connection, stream: str, hash: bytes, canonical: bool,
                  now_ms: int) -> None:
    conn.execute(
        update(blocks)
        .where(blocks.c.stream == stream, blocks.c.hash == hash)
        .values(canonical=canonical, applied_at=now_ms)
    )


def log_changes(conn: Connection, stream: str, changes: Sequence[tuple[str, bytes, int]],
                now_ms: int) -> None:
    """Append ``(kind, hash, number)`` changes, in order, to the block log."""
    if changes:
        conn.execute(insert(block_log), [
            {"stream": stream, "kind": kind, "hash": h, "number": n, "at": now_ms}
            for kind, h, n in changes
        ])


def put_head(conn: Connection, stream: str, hash: bytes, number: int, weight: int,
             now_ms: int) -> None:
    stmt = _insert(conn)(block_head).values(stream=stream, hash=hash, number=number,
                                            weight=str(weight), updated_at=now_ms)
    stmt = stmt.on_conflict_do_update(
        index_elements=[block_head.c.stream],
        set_={"hash": stmt.excluded.hash, "number": stmt.excluded.number,
              "weight": stmt.excluded.weight, "updated_at": stmt.excluded.updated_at},
    )
    conn.execute(stmt)


def get_head(conn: Connection, stream: str) -> BlockHead | None:
    row = conn.execute(
        select(block_head.c.hash, block_head.c.number, block_head.c.weight,
               block_head.c.updated_at).where(block_head.c.stream == stream)
    ).first()
    if row is None:
        return None
    return BlockHead(bytes(row[0]), int(row[1]), int(row[2]), int(row[3]))


_BLOCK_COLUMNS = (blocks.c.hash, blocks.c.number, blocks.c.parent, blocks.c.weight,
                  blocks.c.canonical, blocks.c.payload, blocks.c.applied_at)


def _block(row: Any) -> BlockRow | None:
    if row is None:
        return None
    return BlockRow(bytes(row[0]), int(row[1]), bytes(row[2]), int(row[3]), bool(row[4]),
                    str(row[5]), int(row[6]))


def block_by_hash(conn: Connection, stream: str, hash: bytes) -> BlockRow | None:
    """The block ``hash`` if this node ever applied it (``canonical`` says if it still is)."""
    stmt = select(*_BLOCK_COLUMNS).where(blocks.c.stream == stream, blocks.c.hash == hash)
    return _block(conn.execute(stmt).first())


def block_at(conn: Connection, stream: str, number: int) -> BlockRow | None:
    """The canonical block numbered ``number``, if any."""
    stmt = select(*_BLOCK_COLUMNS).where(
        blocks.c.stream == stream, blocks.c.number == number, blocks.c.canonical.is_(True)
    )
    return _block(conn.execute(stmt).first())


def read_changes(conn: Connection, stream: str, after: int, limit: int) -> list[BlockChange]:
    stmt = (
        select(block_log.c.seq, block_log.c.kind, block_log.c.hash, block_log.c.number,
               block_log.c.at)
        .where(block_log.c.stream == stream, block_log.c.seq > after)
        .order_by(block_log.c.seq)
        .limit(limit)
    )
    return [BlockChange(int(r[0]), str(r[1]), bytes(r[2]), int(r[3]), int(r[4]))
            for r in conn.execute(stmt)]


def last_change_seq(conn: Connection, stream: str) -> int:
    value = conn.execute(
        select(func.max(block_log.c.seq)).where(block_log.c.stream == stream)
    ).scalar()
    return int(value or 0)
