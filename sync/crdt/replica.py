"""``MemoryReplica``: the reference replica, in memory, driven only by the pure rules.

It is the executable specification the SQL implementation must match: apply a message or a
schema declaration, get the effects, fold them into per-entity state. When a declaration
changes a table's versions, the table is re-evaluated from every write seen (the SQL side
replays them from the event log).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from sync.crdt.declaration import Added, SchemaBook, SchemaDeclaration
from sync.crdt.effects import Effect, Reject, count_effects
from sync.crdt.message import CrdtMessage
from sync.crdt.rules import Schemas, compact_entity, step
from sync.crdt.schema import TableSchema, schemas_by_name
from sync.crdt.state import EMPTY, EntityState
from sync.crdt.values import Value

__all__ = ["MemoryReplica", "Row", "Tables"]

Row = dict[str, Value]
Tables = dict[str, dict[str, Row]]


class MemoryReplica:
    """Replicated tables in memory.

    ``schemas``: static schemas (one version per table, no declarations), or None (default)
    for schemas declared on the log (``apply(SchemaDeclaration)``), kept in a ``SchemaBook``
    with ``pins``, ``max_versions``, ``max_tables`` and ``declarers``. ``compact(window)``
    forgets tombstones ``window`` Lamport ticks older than the newest accepted write of their
    table.
    ``tables()`` and ``state()`` are snapshots; ``counters`` accumulates ``count_effects`` of
    every message applied (re-evaluations not included) plus ``schema_<outcome>`` counts.
    """

    def __init__(
        self,
        schemas: Iterable[TableSchema] | Mapping[str, TableSchema] | None = None,
        *,
        pins: Mapping[str, str] | None = None,
        max_versions: int = 64,
        max_tables: int = 256,
        declarers: Iterable[str] | None = None,
        settle_ms: int | None = None,
    ) -> None:
        self.schemas: Schemas
        if schemas is None:
            self.schemas = SchemaBook(pins=pins, max_versions=max_versions,
                                      max_tables=max_tables, declarers=declarers,
                                      settle_ms=settle_ms)
        else:
            if isinstance(schemas, Mapping):
                schemas = schemas.values()
            self.schemas = schemas_by_name(schemas)
        self.counters: Counter[str] = Counter()
        self.high: dict[str, int] = {}  # table -> newest accepted write timestamp
        self._entities: dict[tuple[str, str], EntityState] = {}
        # Everything seen, as the event log keeps it: what a re-evaluation replays.
        self._writes: dict[str, set[CrdtMessage]] = {}
        self._declarations: set[SchemaDeclaration] = set()

    def apply(self, item: CrdtMessage | SchemaDeclaration,
              now_ms: int | None = None) -> list[Effect]:
        """Apply one item; ``now_ms``: when a declaration arrived (owners settle by it)."""
        if isinstance(item, SchemaDeclaration):
            self._declare(item, now_ms)
            return []
        self._writes.setdefault(item.table, set()).add(item)
        effects = self._step(item)
        self.counters.update(count_effects(effects))
        return effects

    def _step(self, message: CrdtMessage) -> list[Effect]:
        key = (message.table, message.entity_id)
        effects, state = step(self.schemas, self._entities.get(key, EMPTY), message)
        if effects and not isinstance(effects[0], Reject):
            table = message.table
            self.high[table] = max(self.high.get(table, 0), message.timestamp)
        self._store(key, state, effects)
        return effects

    def _declare(self, declaration: SchemaDeclaration, now_ms: int | None) -> None:
        self._declarations.add(declaration)
        book = self.schemas
        if not isinstance(book, SchemaBook):
            self.counters["schema_static"] += 1
            return
        added = book.add(declaration, now_ms)
        self.counters[f"schema_{added.value}"] += 1
        for table in book.take_evicted():
            self._clear(table)
        if added is Added.RESCAN:
            book.reset_table(declaration.table, self._declarations)
        if added in (Added.CHANGED, Added.RESCAN):
            self.reevaluate(declaration.table)

    def _clear(self, table: str) -> None:
        for key in [k for k in self._entities if k[0] == table]:
            del self._entities[key]
        self.high.pop(table, None)

    def reevaluate(self, table: str) -> None:
        """Rebuild ``table`` from every write of it seen, against the current schemas."""
        self._clear(table)
        self.counters["tables_reevaluated"] += 1
        for message in sorted(self._writes.get(table, ()), key=lambda m: m.identity):
            self._step(message)

    def compact(self, window: int) -> list[Effect]:
        """Forget tombstones at or before (newest accepted write of the table - ``window``)."""
        effects: list[Effect] = []
        for (table, entity_id), state in sorted(self._entities.items()):
            horizon = self.high.get(table, 0) - window
            done, after = compact_entity(table, entity_id, state, horizon)
            self._store((table, entity_id), after, done)
            effects.extend(done)
        self.counters.update(count_effects(effects))
        return effects

    def _store(self, key: tuple[str, str], state: EntityState, effects: Sequence[Effect]) -> None:
        if not effects:
            return
        if state.is_empty:
            self._entities.pop(key, None)
        else:
            self._entities[key] = state

    def entity(self, table: str, entity_id: str) -> EntityState:
        return self._entities.get((table, entity_id), EMPTY)

    def schema(self, table: str) -> TableSchema | None:
        """The latest version of ``table``'s schema: the columns rows are read with."""
        if isinstance(self.schemas, SchemaBook):
            return self.schemas.latest(table)
        return self.schemas.get(table)

    def _epochs(self, table: str) -> Mapping[str, int] | None:
        return self.schemas.epochs(table) if isinstance(self.schemas, SchemaBook) else None

    def table_names(self) -> list[str]:
        if isinstance(self.schemas, SchemaBook):
            return self.schemas.tables()
        return sorted(self.schemas)

    def get(self, table: str, entity_id: str) -> Row | None:
        """The visible row, every declared column present (None where unwritten or written
        under an older type, see ``TableHistory``)."""
        schema = self.schema(table)
        if schema is None:
            return None
        return self.entity(table, entity_id).row(schema.columns, self._epochs(table))

    def tables(self) -> Tables:
        """table -> entity id -> row, for every declared table (empty ones included)."""
        result: Tables = {name: {} for name in self.table_names()}
        for (table, entity_id), state in sorted(self._entities.items()):
            schema = self.schema(table)
            if schema is None:
                continue
            row = state.row(schema.columns, self._epochs(table))
            if row is not None:
                result[table][entity_id] = row
        return result

    def state(self) -> dict[tuple[str, str], EntityState]:
        """(table, entity id) -> state, sorted; entities with no state at all are absent."""
        return dict(sorted(self._entities.items()))
