"""``MemoryReplica``: the reference replica, in memory, driven only by the pure rules.

It is the executable specification the SQL implementation must match: apply a message, get
the effects, fold them into per-entity state. Time is int milliseconds passed in by the caller.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from sync.crdt.effects import Effect, Reject, count_effects
from sync.crdt.message import CrdtMessage
from sync.crdt.rules import (
    DEFAULT_LIMITS,
    MempoolLimits,
    expired_held,
    next_expiry_ms,
    reduce_entity,
    step,
)
from sync.crdt.schema import TableSchema, schemas_by_name
from sync.crdt.state import EMPTY, EntityState
from sync.crdt.values import Value

__all__ = ["MemoryReplica", "Row", "Tables"]

Row = dict[str, Value]
Tables = dict[str, dict[str, Row]]


class MemoryReplica:
    """Replicated tables in memory.

    ``apply(message, now_ms=...)`` returns the effects; ``expire(now_ms)`` evicts held updates
    past the mempool limits, and ``get_timer()`` says when that is next due. ``tables()`` and
    ``state()`` are snapshots; ``counters`` accumulates ``count_effects`` of everything applied.
    """

    def __init__(
        self,
        schemas: Iterable[TableSchema] | Mapping[str, TableSchema],
        *,
        limits: MempoolLimits = DEFAULT_LIMITS,
    ) -> None:
        if isinstance(schemas, Mapping):
            schemas = schemas.values()
        self.schemas = schemas_by_name(schemas)
        self.limits = limits
        self.counters: Counter[str] = Counter()
        self.high_timestamp = 0
        self._entities: dict[tuple[str, str], EntityState] = {}
        self._holding: set[tuple[str, str]] = set()

    def apply(self, message: CrdtMessage, *, now_ms: int = 0) -> list[Effect]:
        key = (message.table, message.entity_id)
        effects, state = step(
            self.schemas,
            self._entities.get(key, EMPTY),
            message,
            limits=self.limits,
            now_ms=now_ms,
        )
        if not (effects and isinstance(effects[0], Reject)):
            self.high_timestamp = max(self.high_timestamp, message.timestamp)
        self._store(key, state, effects)
        return effects

    def expire(self, now_ms: int) -> list[Effect]:
        """Evict held updates that reached the age or lag limit."""
        effects: list[Effect] = []
        for key in sorted(self._holding):
            drops = expired_held(
                self._entities[key],
                now_ms=now_ms,
                high_timestamp=self.high_timestamp,
                limits=self.limits,
            )
            state = self._entities[key]
            for drop in drops:
                state = reduce_entity(state, drop)
            self._store(key, state, drops)
            effects.extend(drops)
        return effects

    def get_timer(self) -> int | None:
        """The ``now_ms`` at which ``expire`` next has something to evict by age, or None."""
        due = [next_expiry_ms(self._entities[key], self.limits) for key in self._holding]
        return min((d for d in due if d is not None), default=None)

    def _store(self, key: tuple[str, str], state: EntityState, effects: Sequence[Effect]) -> None:
        if not effects:
            return
        if state.is_empty:
            self._entities.pop(key, None)
        else:
            self._entities[key] = state
        if state.held:
            self._holding.add(key)
        else:
            self._holding.discard(key)
        self.counters.update(count_effects(effects))

    def entity(self, table: str, entity_id: str) -> EntityState:
        return self._entities.get((table, entity_id), EMPTY)

    def get(self, table: str, entity_id: str) -> Row | None:
        """The visible row, every declared column present (None where unwritten)."""
        schema = self.schemas.get(table)
        if schema is None:
            return None
        return self.entity(table, entity_id).row(schema.columns)

    def tables(self) -> Tables:
        """table -> entity id -> row, for every declared table (empty ones included)."""
        result: Tables = {name: {} for name in sorted(self.schemas)}
        for (table, entity_id), state in sorted(self._entities.items()):
            row = state.row(self.schemas[table].columns)
            if row is not None:
                result[table][entity_id] = row
        return result

    def state(self) -> dict[tuple[str, str], EntityState]:
        """(table, entity id) -> state, sorted; entities with no state at all are absent."""
        return dict(sorted(self._entities.items()))
