"""The CRDT rules as pure functions: (entity state, message) -> effects, and effect -> state.

Summary (docs/crdt.md has the reasoning):

- A column takes a write when its (timestamp, value text, sender) is greater than the current
  one's; a write not newer than the entity's tombstone is ignored.
- An upsert creates the record; the record exists while its newest upsert is newer than its
  newest delete (a delete wins a tie). Once any upsert has been seen, updates write cells.
- Before the first upsert, updates wait in the mempool (bounded by ``MempoolLimits``).
- A delete removes the row and every register not newer than it, and drops dominated held
  updates; registers newer than it stay, to show if a newer upsert re-creates the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from sync.crdt.effects import (
    CreateRecord,
    DropFromMempool,
    DropReason,
    Effect,
    HoldInMempool,
    NoteUpsert,
    Reject,
    ReleaseFromMempool,
    SetCell,
    Tombstone,
)
from sync.crdt.message import CrdtMessage, Operation
from sync.crdt.schema import TableSchema, validate_message
from sync.crdt.state import Cell, EntityState, Held, Version, cell_wins

__all__ = [
    "DEFAULT_LIMITS",
    "MempoolLimits",
    "expired_held",
    "next_expiry_ms",
    "plan",
    "reduce_entity",
    "step",
]


@dataclass(frozen=True)
class MempoolLimits:
    """Bounds on held updates. Time is int milliseconds supplied by the caller.

    ``max_per_entity``: held updates per (table, entity); the oldest by (timestamp, sender)
    is evicted first. ``max_age_ms``: evicted once held that long. ``max_lag``: evicted once
    the newest accepted timestamp is that many Lamport ticks ahead (None: off; see the replay
    caveat in docs/crdt.md). Evictions are counted and break convergence for that update.
    """

    max_per_entity: int = 64
    max_age_ms: int | None = 24 * 3600 * 1000
    max_lag: int | None = None

    def __post_init__(self) -> None:
        if self.max_per_entity < 1:
            raise ValueError("max_per_entity must be at least 1")
        if self.max_age_ms is not None and self.max_age_ms < 0:
            raise ValueError("max_age_ms must not be negative")
        if self.max_lag is not None and self.max_lag < 0:
            raise ValueError("max_lag must not be negative")


DEFAULT_LIMITS = MempoolLimits()


class _Keep:
    """Marks an unchanged field in ``_with`` (None is a real value there)."""


_KEEP = _Keep()


def _with(
    state: EntityState,
    *,
    upserted: Version | _Keep | None = _KEEP,
    deleted: Version | _Keep | None = _KEEP,
    cells: dict[str, Cell] | _Keep = _KEEP,
    held: tuple[Held, ...] | _Keep = _KEEP,
) -> EntityState:
    # dataclasses.replace is several times slower, and this is the per-message hot path.
    # ``cells`` must be a fresh dict: it is wrapped, not copied.
    return EntityState(
        state.upserted if isinstance(upserted, _Keep) else upserted,
        state.deleted if isinstance(deleted, _Keep) else deleted,
        state.cells if isinstance(cells, _Keep) else MappingProxyType(cells),
        state.held if isinstance(held, _Keep) else held,
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
        return _with(state, deleted=Version(effect.timestamp, effect.sender), cells=kept)
    if isinstance(effect, HoldInMempool):
        held = sorted(
            (*state.held, Held(effect.message, effect.held_at_ms)),
            key=lambda h: h.message.identity,
        )
        return _with(state, held=tuple(held))
    if isinstance(effect, ReleaseFromMempool | DropFromMempool):
        return _with(state, held=tuple(h for h in state.held if h.message != effect.message))
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
        version = Version(message.timestamp, message.sender)
        if before.upserted is None or version > before.upserted:
            if not before.alive and not before.is_dominated(message.timestamp):
                self.emit(
                    CreateRecord(
                        message.table,
                        message.entity_id,
                        message.timestamp,
                        message.sender,
                        before.values(),
                    )
                )
            else:
                self.emit(
                    NoteUpsert(message.table, message.entity_id, message.timestamp, message.sender)
                )
        self.write_cells(message)
        # Held updates exist only before the first upsert; from now on updates apply directly.
        for held in before.held:
            self.emit(ReleaseFromMempool(held.message))
            self.write_cells(held.message)

    def update(self, message: CrdtMessage, limits: MempoolLimits, now_ms: int) -> None:
        state = self.state
        if state.upserted is not None:
            self.write_cells(message)
            return
        if state.is_dominated(message.timestamp):
            return
        if any(h.message == message for h in state.held):
            return
        excess = len(state.held) + 1 - limits.max_per_entity
        candidates = sorted([h.message for h in state.held] + [message], key=lambda m: m.identity)
        victims = candidates[: max(excess, 0)]
        for victim in victims:
            self.emit(DropFromMempool(victim, DropReason.EVICTED_CAP))
        if message not in victims:
            self.emit(HoldInMempool(message, now_ms))

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
        for held in state.held:
            if held.message.timestamp <= message.timestamp:
                self.emit(DropFromMempool(held.message, DropReason.DOMINATED))


def plan(
    schemas: Mapping[str, TableSchema],
    state: EntityState,
    message: CrdtMessage,
    *,
    limits: MempoolLimits = DEFAULT_LIMITS,
    now_ms: int = 0,
) -> list[Effect]:
    """The effects of ``message`` on ``state``, the state of (message.table, message.entity_id).

    Empty when nothing changes (duplicate, superseded, dominated). ``now_ms`` only stamps
    updates put in the mempool, for the age limit.
    """
    return step(schemas, state, message, limits=limits, now_ms=now_ms)[0]


def step(
    schemas: Mapping[str, TableSchema],
    state: EntityState,
    message: CrdtMessage,
    *,
    limits: MempoolLimits = DEFAULT_LIMITS,
    now_ms: int = 0,
) -> tuple[list[Effect], EntityState]:
    """``plan`` plus the state the effects lead to (what ``reduce_entity`` would give)."""
    rejection = validate_message(schemas, message)
    if rejection is not None:
        return [Reject(message, rejection.reason, rejection.detail)], state
    planner = _Planner(state)
    if message.operation is Operation.UPSERT:
        planner.upsert(message)
    elif message.operation is Operation.UPDATE:
        planner.update(message, limits, now_ms)
    else:
        planner.delete(message)
    return planner.effects, planner.state


def expired_held(
    state: EntityState, *, now_ms: int, high_timestamp: int, limits: MempoolLimits
) -> list[DropFromMempool]:
    """Evictions due now: held ``max_age_ms`` or more, or ``max_lag`` ticks behind the newest
    accepted timestamp ``high_timestamp``. Apply them with ``reduce_entity``."""
    drops = []
    for held in state.held:
        if limits.max_age_ms is not None and now_ms - held.held_at_ms >= limits.max_age_ms:
            drops.append(DropFromMempool(held.message, DropReason.EVICTED_AGE))
        elif (
            limits.max_lag is not None and high_timestamp - held.message.timestamp > limits.max_lag
        ):
            drops.append(DropFromMempool(held.message, DropReason.EVICTED_LAG))
    return drops


def next_expiry_ms(state: EntityState, limits: MempoolLimits) -> int | None:
    """When the first held update of ``state`` reaches the age limit, or None."""
    if limits.max_age_ms is None or not state.held:
        return None
    return min(h.held_at_ms for h in state.held) + limits.max_age_ms
