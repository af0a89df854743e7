"""The change feed of the replicated tables: ``crdt_changes`` (migration 0007).

The database application records the visible row changes of a batch (``sync.crdt.row_change``)
in the transaction that applies it, so the feed and the tables never disagree, and a change id
seen by a subscriber is there after a restart. Only the newest ``retain`` changes are kept; the
highest pruned id is remembered, so a subscriber resuming from before it is told it missed
changes instead of silently skipping them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, select

from storage.crdt import EntityKey
from storage.schema import crdt_changes
from storage.state import get_state, put_state
from sync.crdt import (
    EMPTY,
    ChangeKind,
    CrdtMessage,
    EntityState,
    RowChange,
    SchemaBook,
    Value,
    row_change,
    value_text,
)

__all__ = ["PendingChange", "StoredChange", "change_horizon", "changes_of", "newest_change",
           "read_row_changes", "record_changes"]

_HORIZON_KEY = "app/db/changes_pruned"


@dataclass(frozen=True, slots=True)
class PendingChange:
    table: str
    change: RowChange | None  # None: the table was re-derived (a reset)
    lamport: int
    sender: str


@dataclass(frozen=True, slots=True)
class StoredChange:
    change_id: int
    table: str
    kind: str
    entity_id: str | None
    row: dict[str, Value] | None
    lamport: int
    sender: str
    at: int


def changes_of(book: SchemaBook, before: Mapping[EntityKey, EntityState],
               after: Mapping[EntityKey, EntityState],
               last_writes: Mapping[EntityKey, CrdtMessage]) -> list[PendingChange]:
    """The visible row changes of the records in ``last_writes`` (each with the last write
    that changed it), from ``before`` (absent: nothing) to ``after``, under ``book``."""
    out = []
    for key, last in last_writes.items():
        schema = book.latest(key[0])
        assert schema is not None  # only declared tables have accepted writes
        change = row_change(key[1], before.get(key, EMPTY), after[key], schema.columns,
                            book.epochs(key[0]))
        if change is not None:
            out.append(PendingChange(key[0], change, last.timestamp, last.sender))
    return out


def record_changes(conn: Connection, changes: Sequence[PendingChange], at_ms: int,
                   retain: int) -> None:
    """Append ``changes`` and prune all but the newest ``retain``."""
    if not changes:
        return
    rows = []
    for item in changes:
        change = item.change
        rows.append((
            item.table, None if change is None else change.entity_id,
            ChangeKind.RESET.value if change is None else change.kind.value,
            None if change is None or change.row is None else _row_text(change.row),
            item.lamport, item.sender, at_ms))
    # A plain DB-API executemany: this runs in every batch the database application applies.
    marker = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    conn.exec_driver_sql(
        f"INSERT INTO {crdt_changes.name} (table_name, entity_id, kind, row_values, lamport, "
        f"sender, at) VALUES ({', '.join([marker] * 7)})", rows)
    newest = newest_change(conn)
    c = crdt_changes.c
    if newest - retain > change_horizon(conn) and conn.execute(
            delete(crdt_changes).where(c.change_id <= newest - retain)).rowcount:
        put_state(conn, _HORIZON_KEY, str(newest - retain).encode(), at_ms)


def _row_text(row: dict[str, Value]) -> str:
    """``row`` as compact JSON with sorted keys, from the values' canonical texts (column names
    are plain identifiers: nothing to escape), cheaper than ``json.dumps`` per change."""
    return "{" + ",".join(f'"{c}":{value_text(row[c])}' for c in sorted(row)) + "}"


def newest_change(conn: Connection) -> int:
    """The highest change id recorded (0: none yet)."""
    return int(conn.execute(select(func.max(crdt_changes.c.change_id))).scalar() or 0)


def change_horizon(conn: Connection) -> int:
    """Every change id up to this one was pruned (0: none was)."""
    raw = get_state(conn, _HORIZON_KEY)
    return int(raw) if raw else 0


def read_row_changes(conn: Connection, table: str, since: int, limit: int) -> list[StoredChange]:
    """Up to ``limit`` changes of ``table`` with ids after ``since``, oldest first."""
    c = crdt_changes.c
    stmt = (select(c.change_id, c.table_name, c.kind, c.entity_id, c.row_values, c.lamport,
                   c.sender, c.at)
            .where(c.table_name == table, c.change_id > since)
            .order_by(c.change_id).limit(limit))
    return [StoredChange(int(r[0]), r[1], r[2], r[3], None if r[4] is None else json.loads(r[4]),
                         int(r[5]), r[6], int(r[7])) for r in conn.execute(stmt)]
