"""The CRDT rules as pure functions: (entity state, message) -> effects, and effect -> state.

Summary (docs/crdt.md has the reasoning):

- A column takes a write when its (timestamp, value text, sender) is greater than the current
  one's; a write not newer than the entity's tombstone is ignored.
- An upsert creates the record; the record exists while its newest upsert is newer than its
  newest delete (a delete wins a tie). Updates write registers whether or not the record exists:
  before its first upsert they are invisible (the spec's mempool), and an upsert shows them.
  So what an update parks is bounded by the table's columns, and nothing needs evicting.
- A delete removes the row and every register not newer than it; registers newer than it stay,
  to show if a newer upsert re-creates the record.
- Writes are judged by the schema in force at their timestamp (``SchemaBook.at``).
- ``compact_entity`` forgets a tombstone older than the stability horizon.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from sync.crdt.declaration import SchemaBook
from sync.crdt.effects import (
    Compacted,
    CreateRecord,
    Effect,
    NoteUpsert,
    Reject,
    SetCell,
    Tombstone,
)
from sync.crdt.message import CrdtMessage, Operation
from sync.crdt.schema import TableSchema, validate_against
from sync.crdt.state import Cell, EntityState, Version, cell_wins

__all__ = [
    "Schemas",
    "compact_entity",
    "plan",
    "reduce_entity",
    "schema_for",
    "step",
]

# Static schemas (one version per table) or the versioned book of declarations on the log.
Schemas = Mapping[str, TableSchema] | SchemaBook


def schema_for(schemas: Schemas, message: CrdtMessage) -> TableSchema | None:
    """The schema that judges ``message``: the version in force at its timestamp."""
    if isinstance(schemas, SchemaBook):
        return schemas.at(message.table, message.timestamp)
    return schemas.get(message.table)


class _Keep:
    """Marks an unchanged field in ``_with`` (None is a real value there)."""


_KEEP = _Keep()


def _with(
    state: EntityState,
    *,
    upserted: Version | _Keep | None = _KEEP,
    deleted: Version | _Keep | None = _KEEP,
    cells: dict[str, Cell] | _Keep = _KEEP,
) -> EntityState:
    # dataclasses.replace is several times slower, and this is the per-message hot path.
    # ``cells`` must be a fresh dict: it is wrapped, not copied.
    return EntityState(
        state.upserted if isinstance(upserted, _Keep) else upserted,
        state.deleted if isinstance(deleted, _Keep) else deleted,
        state.cells if isinstance(cells, _Keep) else MappingProxyType(cells),
    )


def reduce_entity(state: EntityState, effect: Effect) -> EntityState:
    """The state after one effect (of this entity). The only way state ever changes."""
    if isinstance(effect, SetCell):
        cells = {**state.cells, effect.column: Cell(effect.timestamp, effect.value, effect.sender)}
        return _with(state, cells=cells)
    if isinstance(effect, CreateRecord | NoteUpsert):
        return _with(state, upserted=Version(effect.timestamp, effect.sender))
    if isinstance(effect, Tombstone):
        kept = {c: cell for c, cell in state.cells.items() if cell.timestamp > effect.timestamp}
        # Only upserts newer than the tombstone count: a killed record forgets its version.
        upserted = state.upserted
        if upserted is not None and upserted.timestamp <= effect.timestamp:
            upserted = None
        return _with(state, upserted=upserted, deleted=Version(effect.timestamp, effect.sender),
                     cells=kept)
    if isinstance(effect, Compacted):
        return _compacted(state)
    return state  # Reject


class _Planner:
    """Collects effects while keeping the state they lead to, so later effects see earlier."""

    def __init__(self, state: EntityState) -> None:
        self.state = state
        self.effects: list[Effect] = []

    def emit(self, effect: Effect) -> None:
        self.effects.append(effect)
        self.state = reduce_entity(self.state, effect)

    def write_cells(self, message: CrdtMessage) -> None:
        state = self.state
        if state.is_dominated(message.timestamp):
            return
        # The columns of one message are distinct, so each comparison is independent of the
        # others and the state is rebuilt once (the same as reducing each SetCell in turn).
        cells = dict(state.cells)
        visible = state.alive
        changed = False
        for column, value in message.values.items():
            cell = Cell(message.timestamp, value, message.sender)
            if cell_wins(cell, cells.get(column)):
                cells[column] = cell
                changed = True
                self.effects.append(
                    SetCell(
                        message.table,
                        message.entity_id,
                        column,
                        value,
                        message.timestamp,
                        message.sender,
                        visible=visible,
                    )
                )
        if changed:
            self.state = _with(state, cells=cells)

    def upsert(self, message: CrdtMessage) -> None:
        before = self.state
        if before.is_dominated(message.timestamp):
            return  # not newer than the tombstone: changes nothing at all
        version = Version(message.timestamp, message.sender)
        if before.upserted is None:
            self.emit(
                CreateRecord(
                    message.table,
                    message.entity_id,
                    message.timestamp,
                    message.sender,
                    before.values(),
                )
            )
        elif version > before.upserted:
            self.emit(
                NoteUpsert(message.table, message.entity_id, message.timestamp, message.sender)
            )
        self.write_cells(message)

    def delete(self, message: CrdtMessage) -> None:
        state = self.state
        version = Version(message.timestamp, message.sender)
        if state.deleted is not None and version <= state.deleted:
            return
        survives = state.upserted is not None and state.upserted.timestamp > message.timestamp
        cleared = tuple(c for c, cell in state.cells.items() if cell.timestamp <= version.timestamp)
        self.emit(
            Tombstone(
                message.table,
                message.entity_id,
                message.timestamp,
                message.sender,
                row_removed=state.alive and not survives,
                cleared=cleared,
            )
        )


def plan(schemas: Schemas, state: EntityState, message: CrdtMessage) -> list[Effect]:
    """The effects of ``message`` on ``state``, the state of (message.table, message.entity_id).

    Empty when nothing changes (duplicate, superseded, dominated)."""
    return step(schemas, state, message)[0]


def step(
    schemas: Schemas, state: EntityState, message: CrdtMessage
) -> tuple[list[Effect], EntityState]:
    """``plan`` plus the state the effects lead to (what ``reduce_entity`` would give)."""
    rejection = validate_against(schema_for(schemas, message), message)
    if rejection is not None:
        return [Reject(message, rejection.reason, rejection.detail)], state
    planner = _Planner(state)
    if message.operation is Operation.UPSERT:
        planner.upsert(message)
    elif message.operation is Operation.UPDATE:
        planner.write_cells(message)
    else:
        planner.delete(message)
    return planner.effects, planner.state


def _compacted(state: EntityState) -> EntityState:
    # ``upserted`` is None for a dead record already (a tombstone clears older upserts).
    return EntityState(state.upserted, None, state.cells)


def compact_entity(
    table: str, entity_id: str, state: EntityState, horizon: int
) -> tuple[list[Effect], EntityState]:
    """Forget the tombstone of ``state`` if it is at or before ``horizon``.

    Safe once no write at or before the horizon can still arrive (the stability window,
    docs/crdt.md): the tombstone then only ever decided writes already applied. A dead record
    also forgets its upsert version, so that it stays dead: what is left is the registers newer
    than the tombstone (invisible), or nothing at all."""
    if state.deleted is None or state.deleted.timestamp > horizon:
        return [], state
    after = _compacted(state)
    return [Compacted(table, entity_id, state.deleted.timestamp, after.is_empty)], after
