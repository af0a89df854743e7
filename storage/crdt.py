"""Repository functions for the replicated database (the Spindexer CRDT of ``sync.crdt``).

Generic tables hold every replicated table's state: ``crdt_entities`` (a record's upsert
version and tombstone) and ``crdt_cells`` (one LWW register per written column, the value as
canonical JSON text; updates to records not upserted yet are invisible registers too). Together
they store exactly the ``EntityState`` of every entity; a visible row is an alive entity with
its cells, less those written before their column's epoch. ``crdt_schemas`` keeps the schema
declarations that count. The database application (``node.apps.db_app``) loads the states a batch
touches, runs the pure rules on them and writes the difference back with ``write_states``, all
in the transaction that advances its log cursor.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, delete, func, select
from sqlalchemy.sql.elements import ColumnElement

from storage.schema import crdt_cells, crdt_entities, crdt_schemas
from sync.crdt import (
    Cell,
    EntityState,
    SchemaDeclaration,
    Value,
    Version,
    decode_content,
    value_text,
)

__all__ = [
    "EntityKey",
    "StoredRow",
    "clear_table",
    "count_rows",
    "get_row",
    "load_all_states",
    "load_declarations",
    "load_states",
    "query_rows",
    "store_declarations",
    "tombstoned_before",
    "write_states",
]

EntityKey = tuple[str, str]  # (table, entity id)

# Bound parameters per IN list: well under every backend's limit.
_CHUNK = 500


@dataclass(frozen=True, slots=True)
class StoredRow:
    """A visible row: its entity id and the columns written so far (unwritten ones absent)."""

    entity_id: str
    values: dict[str, Value]


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


_Filter = Callable[[Table], tuple[ColumnElement[bool], ...]]


def _of_entities(table: str, entities: Sequence[str]) -> _Filter:
    return lambda t: (t.c.table_name == table, t.c.entity_id.in_(entities))


class _Builder:
    """Collects the rows of the state tables and turns them into ``EntityState`` values."""

    def __init__(self) -> None:
        self.versions: dict[EntityKey, tuple[Version | None, Version | None]] = {}
        self.cells: dict[EntityKey, dict[str, Cell]] = {}

    def add(self, conn: Connection, where: _Filter) -> None:
        e, c = crdt_entities.c, crdt_cells.c
        rows = conn.execute(
            select(e.table_name, e.entity_id, e.upserted_lamport, e.upserted_by,
                   e.deleted_lamport, e.deleted_by).where(*where(crdt_entities))
        )
        for table, entity, up_ts, up_by, del_ts, del_by in rows:
            upserted = None if up_ts is None else Version(up_ts, up_by)
            deleted = None if del_ts is None else Version(del_ts, del_by)
            self.versions[(table, entity)] = (upserted, deleted)
        rows = conn.execute(
            select(c.table_name, c.entity_id, c.column_name, c.lamport, c.value, c.sender)
            .where(*where(crdt_cells))
        )
        for table, entity, column, lamport, value, sender in rows:
            self.cells.setdefault((table, entity), {})[column] = Cell(
                lamport, json.loads(value), sender
            )

    def states(self) -> dict[EntityKey, EntityState]:
        out: dict[EntityKey, EntityState] = {}
        for key in sorted(self.versions.keys() | self.cells.keys()):
            upserted, deleted = self.versions.get(key, (None, None))
            out[key] = EntityState(upserted, deleted, self.cells.get(key, {}))
        return out


def load_states(conn: Connection, keys: Iterable[EntityKey]) -> dict[EntityKey, EntityState]:
    """The stored state of each of ``keys``; entities with no state at all are absent."""
    by_table: dict[str, list[str]] = {}
    for table, entity in set(keys):
        by_table.setdefault(table, []).append(entity)
    builder = _Builder()
    for table, entities in sorted(by_table.items()):
        for chunk in _chunks(sorted(entities)):
            builder.add(conn, _of_entities(table, chunk))
    return builder.states()


def load_all_states(conn: Connection) -> dict[EntityKey, EntityState]:
    """Every stored entity state, sorted by key (for tests and consistency checks)."""
    builder = _Builder()
    builder.add(conn, lambda _t: ())
    return builder.states()


def _digest(message: bytes) -> str:
    return hashlib.sha256(message).hexdigest()


def _marker(conn: Connection) -> str:
    return "?" if conn.dialect.paramstyle == "qmark" else "%s"


def _upsert(conn: Connection, table: Table, rows: list[tuple[Any, ...]], keys: int) -> None:
    """Insert or replace ``rows`` (every column, in table order; the first ``keys`` are the
    primary key). A plain DB-API executemany: this is the hot path of applying a batch, and
    ``INSERT .. ON CONFLICT .. DO UPDATE`` is spelled the same in SQLite and PostgreSQL."""
    if not rows:
        return
    names = [c.name for c in table.columns]
    sql = (f"INSERT INTO {table.name} ({', '.join(names)}) "
           f"VALUES ({', '.join([_marker(conn)] * len(names))}) "
           f"ON CONFLICT ({', '.join(names[:keys])}) DO UPDATE SET "
           + ", ".join(f"{n} = excluded.{n}" for n in names[keys:]))
    conn.exec_driver_sql(sql, rows)


def _delete(conn: Connection, table: Table, rows: list[tuple[Any, ...]]) -> None:
    """Delete by primary key (``rows`` hold its columns, in table order)."""
    if not rows:
        return
    names = [c.name for c in table.primary_key.columns]
    where = " AND ".join(f"{n} = {_marker(conn)}" for n in names)
    conn.exec_driver_sql(f"DELETE FROM {table.name} WHERE {where}", rows)


def write_states(
    conn: Connection,
    before: Mapping[EntityKey, EntityState],
    after: Mapping[EntityKey, EntityState],
) -> None:
    """Store ``after`` (the new states of some entities) given what was stored, ``before``
    (absent: nothing stored). Only differences are written."""
    empty = EntityState()
    entity_rows: list[tuple[Any, ...]] = []
    entity_gone: list[tuple[Any, ...]] = []
    cell_rows: list[tuple[Any, ...]] = []
    cell_gone: list[tuple[Any, ...]] = []
    for (table, entity), new in after.items():
        old = before.get((table, entity), empty)
        if (new.upserted, new.deleted) != (old.upserted, old.deleted):
            if new.upserted is None and new.deleted is None:
                entity_gone.append((table, entity))
            else:
                up, dl = new.upserted, new.deleted
                entity_rows.append((
                    table, entity,
                    None if up is None else up.timestamp, None if up is None else up.sender,
                    None if dl is None else dl.timestamp, None if dl is None else dl.sender,
                    new.alive,
                ))
        if new.cells is not old.cells:
            for column, cell in new.cells.items():
                if old.cells.get(column) != cell:
                    cell_rows.append((table, entity, column, cell.timestamp, cell.sender,
                                      value_text(cell.value)))
            for column in old.cells.keys() - new.cells.keys():
                cell_gone.append((table, entity, column))
    _delete(conn, crdt_entities, entity_gone)
    _upsert(conn, crdt_entities, entity_rows, 2)
    _delete(conn, crdt_cells, cell_gone)
    _upsert(conn, crdt_cells, cell_rows, 3)


def clear_table(conn: Connection, table: str) -> None:
    """Forget every record of ``table`` (before re-deriving it from the log)."""
    for state_table in (crdt_cells, crdt_entities):
        conn.execute(delete(state_table).where(state_table.c.table_name == table))


def tombstoned_before(conn: Connection, table: str, horizon: int, limit: int) -> list[str]:
    """Up to ``limit`` entities of ``table`` whose tombstone is at or before ``horizon``."""
    e = crdt_entities.c
    stmt = (select(e.entity_id)
            .where(e.table_name == table, e.deleted_lamport <= horizon)
            .order_by(e.deleted_lamport).limit(limit))
    return [str(r[0]) for r in conn.execute(stmt)]


def load_declarations(conn: Connection) -> list[SchemaDeclaration]:
    """Every stored schema declaration (our own canonical encodings)."""
    s = crdt_schemas.c
    out = []
    for lamport, sender, raw in conn.execute(select(s.lamport, s.sender, s.declaration)):
        item = decode_content(bytes(raw), timestamp=lamport, sender=sender)
        if isinstance(item, SchemaDeclaration):
            out.append(item)
    return out


def store_declarations(conn: Connection, table: str,
                       declarations: Iterable[SchemaDeclaration]) -> None:
    """Make ``declarations`` the stored declarations of ``table``."""
    conn.execute(delete(crdt_schemas).where(crdt_schemas.c.table_name == table))
    # The event's own Lamport time (the claim's): ``since`` is in the encoding.
    rows = [{"table_name": table, "lamport": d.claimed, "sender": d.sender,
             "digest": _digest(d.encoded), "declaration": d.encoded} for d in declarations]
    if rows:
        conn.execute(crdt_schemas.insert(), rows)


def _cells_of(conn: Connection, table: str, entities: Sequence[str],
              epochs: Mapping[str, int]) -> dict[str, dict[str, Value]]:
    """Cells of ``entities`` for the columns of ``epochs`` (column -> epoch), hiding those
    written at or before their column's epoch."""
    c = crdt_cells.c
    wanted = list(epochs)
    out: dict[str, dict[str, Value]] = {}
    for chunk in _chunks(entities):
        rows = conn.execute(
            select(c.entity_id, c.column_name, c.value, c.lamport).where(
                c.table_name == table, c.entity_id.in_(chunk), c.column_name.in_(wanted)
            )
        )
        for entity, column, value, lamport in rows:
            if lamport > epochs[column]:
                out.setdefault(entity, {})[column] = json.loads(value)
    return out


def get_row(conn: Connection, table: str, entity_id: str,
            epochs: Mapping[str, int]) -> StoredRow | None:
    """The visible row ``entity_id`` of ``table`` with its written columns (``epochs``:
    column -> epoch of the declared columns), or None."""
    e = crdt_entities.c
    alive = conn.execute(
        select(e.alive).where(e.table_name == table, e.entity_id == entity_id)
    ).scalar_one_or_none()
    if not alive:
        return None
    return StoredRow(entity_id, _cells_of(conn, table, [entity_id], epochs).get(entity_id, {}))


def query_rows(conn: Connection, table: str, epochs: Mapping[str, int],
               after: str | None = None, limit: int = 1000,
               where: Mapping[str, Value] | None = None) -> list[StoredRow]:
    """Visible rows of ``table`` in entity id order, the first ``limit`` after ``after``, with
    every column of ``where`` (column -> value) equal to its value; the column ``id`` is the
    entity id, and None matches an unwritten (NULL) cell."""
    e = crdt_entities.c
    stmt = select(e.entity_id).where(e.table_name == table, e.alive.is_(True))
    if after is not None:
        stmt = stmt.where(e.entity_id > after)
    for column, value in (where or {}).items():
        if column == "id":
            stmt = stmt.where(e.entity_id == value)
            continue
        c = crdt_cells.c
        # A cell hidden by its column's epoch reads NULL, as in _cells_of.
        cell = select(c.entity_id).where(
            c.table_name == table, c.entity_id == e.entity_id, c.column_name == column,
            c.lamport > epochs.get(column, -1))
        if value is None:
            stmt = stmt.where(~cell.where(c.value != "null").exists())
        else:
            stmt = stmt.where(cell.where(c.value == value_text(value)).exists())
    ids = [str(r[0]) for r in conn.execute(stmt.order_by(e.entity_id).limit(limit))]
    cells = _cells_of(conn, table, ids, epochs)
    return [StoredRow(entity, cells.get(entity, {})) for entity in ids]


def count_rows(conn: Connection) -> dict[str, int]:
    """Visible rows of every replicated table that has any."""
    e = crdt_entities.c
    stmt = (select(e.table_name, func.count()).where(e.alive.is_(True))
            .group_by(e.table_name))
    return {str(table): int(count) for table, count in conn.execute(stmt)}
