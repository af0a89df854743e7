"""Convergence: the same messages, in any order and multiplicity, give the same tables and state.

Besides comparing replicas with each other, the final state is compared with an oracle that
computes it directly from the *set* of messages (the declarative rule of docs/crdt.md), and the
rows are rebuilt from the effects alone, the way the SQL implementation will use them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.crdt import (
    Cell,
    CrdtMessage,
    CreateRecord,
    Effect,
    EntityState,
    MemoryReplica,
    Operation,
    SetCell,
    Tables,
    TableSchema,
    Tombstone,
    Value,
    Version,
    cell_wins,
    reduce_entity,
    schemas_by_name,
    validate_message,
    value_text,
)

SCHEMAS = schemas_by_name(
    [
        TableSchema(
            "artists", {"name": "text", "plays": "integer", "score": "real", "ok": "boolean"}
        ),
        TableSchema("private", {"note": "text"}, writers=frozenset({"alice", "bob"})),
    ]
)
COLUMN_VALUES: dict[str, list[Value]] = {
    "name": ["a", "b", "zz", None],
    "plays": [1, 2, 10, -1, None],
    "score": [0.5, 1.0, -0.0, None],
    "ok": [True, False, None],
    "note": ["x", "y", None],
}
TABLE_COLUMNS = {"artists": ["name", "plays", "score", "ok"], "private": ["note"]}
# Occasional schema violations, which every replica must reject alike: a wrong type, a column
# that does not exist. (Unauthorised writes come from carol writing "private".)
CORRUPTIONS: list[tuple[str, Value]] = [("name", 3), ("plays", "x"), ("genre", "rock")]
SENDERS = ["alice", "bob", "carol"]


@st.composite
def messages(
    draw: st.DrawFn,
    tables: Sequence[str] = ("artists", "artists", "artists", "private"),
    entities: Sequence[str] = ("e1", "e2"),
) -> CrdtMessage:
    table = draw(st.sampled_from(tables))
    operation = draw(st.sampled_from(Operation))
    cells: dict[str, Value] = {}
    if operation is not Operation.DELETE:
        columns = draw(
            st.lists(
                st.sampled_from(TABLE_COLUMNS[table]),
                min_size=operation is Operation.UPDATE,
                max_size=3,
                unique=True,
            )
        )
        cells = {c: draw(st.sampled_from(COLUMN_VALUES[c])) for c in columns}
        if draw(st.integers(0, 19)) == 0:
            column, value = draw(st.sampled_from(CORRUPTIONS))
            cells[column] = value
    return CrdtMessage(
        operation,
        table,
        draw(st.sampled_from(entities)),
        cells,
        timestamp=draw(st.integers(0, 6)),  # a small range, so that ties are common
        sender=draw(st.sampled_from(SENDERS)),
    )


def oracle(all_messages: Sequence[CrdtMessage]) -> dict[tuple[str, str], EntityState]:
    """The state as a function of the message set, written independently of the rules."""
    valid = {m for m in all_messages if validate_message(SCHEMAS, m) is None}
    by_entity: dict[tuple[str, str], list[CrdtMessage]] = {}
    for m in sorted(valid, key=lambda m: m.identity):
        by_entity.setdefault((m.table, m.entity_id), []).append(m)
    expected = {}
    for key, group in sorted(by_entity.items()):
        of = {op: [m for m in group if m.operation is op] for op in Operation}
        upserted = max((Version(m.timestamp, m.sender) for m in of[Operation.UPSERT]), default=None)
        deleted = max((Version(m.timestamp, m.sender) for m in of[Operation.DELETE]), default=None)
        horizon = -1 if deleted is None else deleted.timestamp
        if upserted is not None and upserted.timestamp <= horizon:
            upserted = None  # only upserts newer than the tombstone count
        # Updates count whether or not an upsert exists: before it they are invisible.
        writes = of[Operation.UPSERT] + of[Operation.UPDATE]
        cells: dict[str, Cell] = {}
        for m in writes:
            for column, value in m.values.items():
                cell = Cell(m.timestamp, value, m.sender)
                if m.timestamp > horizon and cell_wins(cell, cells.get(column)):
                    cells[column] = cell
        state = EntityState(upserted, deleted, cells)
        if not state.is_empty:
            expected[key] = state
    return expected


def canonical(states: Mapping[tuple[str, str], EntityState]) -> object:
    """States with values as their canonical text, so 0.0 and -0.0 (say) are told apart."""
    return [
        (
            key,
            s.upserted,
            s.deleted,
            [
                (c, cell.timestamp, value_text(cell.value), cell.sender)
                for c, cell in sorted(s.cells.items())
            ],
        )
        for key, s in states.items()
    ]


class RowsFromEffects:
    """Rows and state kept only from effects, as the SQL implementation keeps its tables."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, Value]] = {}
        self.states: dict[tuple[str, str], EntityState] = {}

    def apply(self, message: CrdtMessage, effects: Sequence[Effect]) -> None:
        key = (message.table, message.entity_id)
        state = self.states.get(key, EntityState())
        for effect in effects:
            state = reduce_entity(state, effect)
        if state.is_empty:
            self.states.pop(key, None)
        else:
            self.states[key] = state
        for effect in effects:
            if isinstance(effect, CreateRecord):
                key = (effect.table, effect.entity_id)
                assert key not in self.rows
                columns = SCHEMAS[effect.table].columns
                self.rows[key] = {c: effect.values.get(c) for c in sorted(columns)}
            elif isinstance(effect, SetCell):
                key = (effect.table, effect.entity_id)
                assert (key in self.rows) is effect.visible
                if effect.visible:
                    self.rows[key][effect.column] = effect.value
            elif isinstance(effect, Tombstone):
                key = (effect.table, effect.entity_id)
                if effect.row_removed:
                    del self.rows[key]
                elif key in self.rows:
                    self.rows[key].update(dict.fromkeys(effect.cleared))

    def tables(self) -> Tables:
        result: Tables = {name: {} for name in sorted(SCHEMAS)}
        for (table, entity_id), row in sorted(self.rows.items()):
            result[table][entity_id] = row
        return result


@st.composite
def deliveries(draw: st.DrawFn, count: int) -> list[int]:
    """Every index at least once, some more than once, in a random order."""
    extra = draw(st.lists(st.integers(0, count - 1), max_size=count))
    return draw(st.permutations(list(range(count)) + extra))


def check_convergence(sent: list[CrdtMessage], data: st.DataObject) -> None:
    expected = oracle(sent)
    tables = []
    for _ in range(3):
        replica = MemoryReplica(SCHEMAS)
        shadow = RowsFromEffects()
        for index in data.draw(deliveries(len(sent))):
            shadow.apply(sent[index], replica.apply(sent[index]))
        assert canonical(replica.state()) == canonical(expected)
        assert replica.tables() == shadow.tables()
        assert canonical(dict(sorted(shadow.states.items()))) == canonical(expected)
        tables.append(replica.tables())
    assert tables[0] == tables[1] == tables[2]
    # Replaying the log in send order (a new replica) gives the same tables too.
    fresh = MemoryReplica(SCHEMAS)
    for message in sent:
        fresh.apply(message)
    assert fresh.tables() == tables[0]


@settings(deadline=None, max_examples=150)
@given(st.lists(messages(), min_size=10, max_size=30), st.data())
def test_replicas_converge_in_any_order_with_duplicates(
    sent: list[CrdtMessage], data: st.DataObject
) -> None:
    check_convergence(sent, data)


@settings(deadline=None, max_examples=200)
@given(st.lists(messages(tables=["artists"], entities=["e1"]), min_size=6, max_size=20), st.data())
def test_one_record_histories_converge(sent: list[CrdtMessage], data: st.DataObject) -> None:
    """Many operations on a single record: deletes, re-creations and parked updates interleave."""
    check_convergence(sent, data)


@settings(deadline=None, max_examples=200)
@given(
    st.lists(
        st.tuples(st.sampled_from(SENDERS), st.sampled_from(["a", "b", "zz", None])),
        min_size=2,
        max_size=6,
    ),
    st.integers(0, 3),
    st.data(),
)
def test_equal_timestamps_same_winner_everywhere(
    writers: list[tuple[str, Value]], timestamp: int, data: st.DataObject
) -> None:
    sent = [
        CrdtMessage(
            Operation.UPSERT, "artists", "e1", {"name": value}, timestamp=timestamp, sender=sender
        )
        for sender, value in writers
    ]
    winner = max(writers, key=lambda w: (value_text(w[1]), w[0]))
    for _ in range(3):
        replica = MemoryReplica(SCHEMAS)
        for index in data.draw(deliveries(len(sent))):
            replica.apply(sent[index])
        assert replica.entity("artists", "e1").cells["name"] == Cell(
            timestamp, winner[1], winner[0]
        )


@settings(deadline=None, max_examples=200)
@given(st.lists(messages(), min_size=1, max_size=16), st.data())
def test_updates_parked_before_their_record_match_direct_application(
    sent: list[CrdtMessage], data: st.DataObject
) -> None:
    """Whatever was parked before its upsert in one order was applied to a visible row in
    another: same result."""
    updates_first = sorted(sent, key=lambda m: m.operation is not Operation.UPDATE)
    upserts_first = sorted(sent, key=lambda m: m.operation is not Operation.UPSERT)
    results = []
    for order in (updates_first, upserts_first, data.draw(st.permutations(sent))):
        replica = MemoryReplica(SCHEMAS)
        for message in order:
            replica.apply(message)
        results.append((replica.tables(), canonical(replica.state())))
    assert results[0] == results[1] == results[2]
