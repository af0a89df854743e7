"""The CRDT rules on hand-picked cases: parked updates, ties, rejections, deletes, compaction."""

from __future__ import annotations

import pytest

from sync.crdt import (
    Cell,
    ColumnType,
    Compacted,
    CrdtMessage,
    CreateRecord,
    Effect,
    EntityState,
    MemoryReplica,
    Operation,
    Reject,
    RejectReason,
    SetCell,
    TableSchema,
    Tombstone,
    Value,
    cell_wins,
    plan,
    reduce_entity,
    schemas_by_name,
)

ARTISTS = TableSchema(
    "artists",
    {"name": "text", "plays": "integer", "score": "real", "verified": "boolean"},
)
PRIVATE = TableSchema("private", {"note": ColumnType.TEXT}, writers=frozenset({"alice"}))
SCHEMAS = [ARTISTS, PRIVATE]


def upsert(ts: int, sender: str = "alice", entity: str = "a1", **cells: Value) -> CrdtMessage:
    return CrdtMessage(Operation.UPSERT, "artists", entity, cells, timestamp=ts, sender=sender)


def update(ts: int, sender: str = "alice", entity: str = "a1", **cells: Value) -> CrdtMessage:
    return CrdtMessage(Operation.UPDATE, "artists", entity, cells, timestamp=ts, sender=sender)


def delete(ts: int, sender: str = "alice", entity: str = "a1") -> CrdtMessage:
    return CrdtMessage(Operation.DELETE, "artists", entity, timestamp=ts, sender=sender)


def replica() -> MemoryReplica:
    return MemoryReplica(SCHEMAS)


def row(**cells: Value) -> dict[str, Value]:
    return {"name": None, "plays": None, "score": None, "verified": None, **cells}


def test_upsert_creates_and_update_changes() -> None:
    r = replica()
    effects = r.apply(upsert(1, name="Ana"))
    assert effects == [
        CreateRecord("artists", "a1", 1, "alice", {}),
        SetCell("artists", "a1", "name", "Ana", 1, "alice", visible=True),
    ]
    r.apply(update(2, plays=5))
    assert r.get("artists", "a1") == row(name="Ana", plays=5)
    assert r.tables() == {"artists": {"a1": row(name="Ana", plays=5)}, "private": {}}


def test_older_write_loses_and_duplicate_is_noop() -> None:
    r = replica()
    r.apply(upsert(5, name="new"))
    assert r.apply(update(3, name="old")) == []
    assert r.apply(upsert(5, name="new")) == []
    assert r.get("artists", "a1") == row(name="new")


def test_update_before_record_is_parked_invisibly_then_shows() -> None:
    r = replica()
    early = update(4, "bob", plays=9, name="from-update")
    effects = r.apply(early)
    assert effects == [
        SetCell("artists", "a1", "name", "from-update", 4, "bob", visible=False),
        SetCell("artists", "a1", "plays", 9, 4, "bob", visible=False),
    ]
    assert r.get("artists", "a1") is None
    assert r.tables()["artists"] == {}
    assert r.entity("artists", "a1").upserted is None

    # The upsert is older than the parked update, so the update's columns win; name goes to the
    # update (ts 4) even though the upsert also sets it (ts 2).
    effects = r.apply(upsert(2, "alice", name="from-upsert", score=1.5))
    assert effects[0] == CreateRecord("artists", "a1", 2, "alice",
                                      {"name": "from-update", "plays": 9})
    assert r.get("artists", "a1") == row(name="from-update", plays=9, score=1.5)
    # A second copy of the parked update changes nothing.
    assert r.apply(early) == []


def test_parked_update_older_than_upsert_loses() -> None:
    r = replica()
    r.apply(update(1, "bob", name="stale"))
    r.apply(upsert(3, name="fresh"))
    assert r.get("artists", "a1") == row(name="fresh")


def test_parked_updates_are_bounded_by_the_columns() -> None:
    """One sender parking many updates for a record that never comes costs one register per
    column, whatever the number of updates: nothing to evict, so nothing diverges."""
    r = replica()
    for ts in range(1, 500):
        r.apply(update(ts, "carol", plays=ts, name=f"n{ts}"))
    state = r.entity("artists", "a1")
    assert sorted(state.cells) == ["name", "plays"]
    assert state.cells["plays"] == Cell(499, 499, "carol")


@pytest.mark.parametrize("first", ["alice", "bob"])
def test_equal_timestamps_same_winner_in_either_order(first: str) -> None:
    writes = {"alice": upsert(7, "alice", name="apple"), "bob": upsert(7, "bob", name="zebra")}
    second = "bob" if first == "alice" else "alice"
    r = replica()
    r.apply(writes[first])
    r.apply(writes[second])
    # Greater value text wins on a timestamp tie: "zebra" > "apple".
    assert r.get("artists", "a1") == row(name="zebra")
    assert r.entity("artists", "a1").cells["name"] == Cell(7, "zebra", "bob")


@pytest.mark.parametrize("first", ["alice", "bob"])
def test_equal_timestamp_and_value_tie_breaks_on_sender(first: str) -> None:
    second = "bob" if first == "alice" else "alice"
    r = replica()
    r.apply(upsert(7, first, plays=3))
    r.apply(update(7, second, plays=3))
    assert r.entity("artists", "a1").cells["plays"] == Cell(7, 3, "bob")


def test_value_order_is_the_json_text_so_numbers_sort_as_strings() -> None:
    # "9" > "10" as strings: the spec says string sort, and the rule says the greater wins.
    assert cell_wins(Cell(1, 9, "a"), Cell(1, 10, "a"))
    # Text order of kinds: strings ('"') < negatives ('-') < digits < false < null < true.
    assert cell_wins(Cell(1, None, "a"), Cell(1, "zzz", "z"))
    assert cell_wins(Cell(1, True, "a"), Cell(1, None, "z"))
    assert not cell_wins(Cell(1, "b", "a"), Cell(2, "a", "a"))
    assert cell_wins(Cell(1, "b", "b"), Cell(1, "b", "a"))
    assert not cell_wins(Cell(1, "b", "a"), Cell(1, "b", "a"))


BAD_MESSAGES = {
    RejectReason.UNKNOWN_TABLE: CrdtMessage(
        Operation.UPSERT, "songs", "s1", {"name": "x"}, timestamp=1, sender="alice"
    ),
    RejectReason.UNKNOWN_COLUMN: upsert(1, name="ok", genre="rock"),
    RejectReason.BAD_TYPE: upsert(1, name="ok", plays="many"),
    RejectReason.UNAUTHORISED_WRITER: CrdtMessage(
        Operation.UPSERT, "private", "p1", {"note": "hi"}, timestamp=1, sender="mallory"
    ),
}


@pytest.mark.parametrize("reason", list(RejectReason))
def test_each_rejection_changes_nothing_and_is_counted(reason: RejectReason) -> None:
    r = replica()
    r.apply(upsert(0, name="before"))
    before = (r.tables(), r.state())
    message = BAD_MESSAGES[reason]
    effects = r.apply(message)
    assert len(effects) == 1 and isinstance(effects[0], Reject)
    assert effects[0].reason is reason and effects[0].message == message
    assert effects[0].detail
    # Never half-applied: the valid column of the same message did not land either.
    assert (r.tables(), r.state()) == before
    assert r.counters[f"rejected_{reason.value}"] == 1


@pytest.mark.parametrize(
    ("value", "column", "ok"),
    [
        (1, "plays", True),
        (True, "plays", False),
        (1.0, "plays", False),
        (1.5, "score", True),
        (2, "score", False),
        (False, "verified", True),
        (0, "verified", False),
        ("x", "name", True),
        (None, "name", True),
        (None, "plays", True),
    ],
)
def test_column_types_are_strict(value: Value, column: str, ok: bool) -> None:
    message = CrdtMessage(
        Operation.UPSERT, "artists", "a1", {column: value}, timestamp=1, sender="alice"
    )
    effects = replica().apply(message)
    assert (not isinstance(effects[0], Reject)) is ok


def test_allowed_writer_may_write_private_table() -> None:
    r = replica()
    r.apply(
        CrdtMessage(Operation.UPSERT, "private", "p1", {"note": "hi"}, timestamp=1, sender="alice")
    )
    assert r.get("private", "p1") == {"note": "hi"}
    # An unauthorised delete is refused too.
    r.apply(CrdtMessage(Operation.DELETE, "private", "p1", timestamp=9, sender="mallory"))
    assert r.get("private", "p1") == {"note": "hi"}


def test_table_schema_validation() -> None:
    with pytest.raises(ValueError, match="not an identifier"):
        TableSchema("bad name", {})
    with pytest.raises(ValueError, match="not an identifier"):
        TableSchema("t", {"bad-col": "text"})
    with pytest.raises(ValueError, match="reserved"):
        TableSchema("t", {"id": "text"})
    with pytest.raises(ValueError, match="unknown type 'blob'"):
        TableSchema("t", {"c": "blob"})
    with pytest.raises(ValueError, match="writers"):
        TableSchema("t", {"c": "text"}, writers=frozenset({""}))
    with pytest.raises(ValueError, match="declared twice"):
        schemas_by_name([ARTISTS, ARTISTS])
    schema = TableSchema("t", {"b": "integer", "a": ColumnType.TEXT})
    assert dict(schema.columns) == {"a": ColumnType.TEXT, "b": ColumnType.INTEGER}
    assert schema == TableSchema("t", {"a": "text", "b": "integer"})


def test_delete_removes_row_and_wins_over_same_timestamp_update() -> None:
    r = replica()
    r.apply(upsert(1, name="Ana"))
    effects = r.apply(delete(5))
    assert effects == [Tombstone("artists", "a1", 5, "alice", row_removed=True, cleared=("name",))]
    assert r.get("artists", "a1") is None
    assert r.apply(update(5, "bob", plays=1)) == []  # not newer than the delete
    assert r.apply(upsert(5, "zed", name="tie")) == []  # nor is this upsert
    assert r.get("artists", "a1") is None
    state = r.entity("artists", "a1")
    assert state.cells == {} and state.upserted is None  # the killed record's version goes


def test_later_upsert_recreates_with_only_newer_cells() -> None:
    r = replica()
    r.apply(upsert(1, name="Ana", plays=1))
    r.apply(delete(5))
    r.apply(update(7, "bob", score=2.5))  # after the delete: kept, but invisible
    assert r.get("artists", "a1") is None
    effects = r.apply(upsert(6, "carol", name="Bea"))
    assert effects[0] == CreateRecord("artists", "a1", 6, "carol", {"score": 2.5})
    assert r.get("artists", "a1") == row(name="Bea", score=2.5)


def test_update_does_not_recreate_a_deleted_record() -> None:
    r = replica()
    r.apply(upsert(1, name="Ana"))
    r.apply(delete(2))
    effects = r.apply(update(3, plays=4))
    assert effects == [SetCell("artists", "a1", "plays", 4, 3, "alice", visible=False)]
    assert r.get("artists", "a1") is None


def test_late_delete_clears_older_columns_of_a_newer_record() -> None:
    r = replica()
    r.apply(upsert(1, name="Ana", plays=3))
    r.apply(upsert(8, "bob", score=0.5))
    effects = r.apply(delete(4))
    assert effects == [
        Tombstone("artists", "a1", 4, "alice", row_removed=False, cleared=("name", "plays"))
    ]
    assert r.get("artists", "a1") == row(score=0.5)


def test_older_delete_is_ignored_and_newest_delete_kept() -> None:
    r = replica()
    r.apply(delete(5))
    assert r.apply(delete(3)) == []
    assert r.apply(delete(5)) == []
    r.apply(delete(5, "zed"))
    state = r.entity("artists", "a1")
    assert state.deleted is not None and (state.deleted.timestamp, state.deleted.sender) == (
        5,
        "zed",
    )


def test_delete_clears_dominated_parked_updates() -> None:
    r = replica()
    r.apply(update(2, plays=1))
    r.apply(update(9, score=2.0))
    r.apply(delete(5))
    assert sorted(r.entity("artists", "a1").cells) == ["score"]
    assert r.apply(update(4, plays=3)) == []  # dominated on arrival
    r.apply(upsert(6, name="Ana"))
    assert r.get("artists", "a1") == row(name="Ana", score=2.0)


def test_compaction_forgets_old_tombstones_only() -> None:
    r = replica()
    r.apply(upsert(1, name="gone"))
    r.apply(delete(2))
    r.apply(upsert(3, entity="a2", name="back"))
    r.apply(delete(4, entity="a2"))
    r.apply(upsert(6, entity="a2", name="again"))
    r.apply(delete(8, entity="a3"))
    r.apply(update(9, entity="a3", plays=1))  # parked after its tombstone
    r.apply(upsert(20, entity="a4", name="newest"))
    before = r.tables()
    assert r.compact(window=14) == [  # horizon 20 - 14 = 6: tombstones at 2 and 4
        Compacted("artists", "a1", 2, removed=True),
        Compacted("artists", "a2", 4, removed=False),
    ]
    assert r.tables() == before
    assert r.entity("artists", "a1") == EntityState()
    assert r.entity("artists", "a2").deleted is None
    assert r.entity("artists", "a3").deleted is not None
    r.compact(window=0)
    a3 = r.entity("artists", "a3")
    assert (a3.upserted, a3.deleted, sorted(a3.cells)) == (None, None, ["plays"])
    assert r.tables() == before
    assert r.counters["tombstones_compacted"] == 3
    # A record re-created after compaction starts from what survived, as it would have.
    r.apply(upsert(30, entity="a3", name="x"))
    assert r.get("artists", "a3") == row(name="x", plays=1)


def test_plan_is_pure_and_effects_reproduce_the_state() -> None:
    schemas = schemas_by_name(SCHEMAS)
    state = EntityState()
    messages = [update(3, plays=1), upsert(2, name="a"), delete(4), upsert(6, name="b")]
    effects: list[Effect] = []
    for message in messages:
        planned = plan(schemas, state, message)
        assert plan(schemas, state, message) == planned  # same input, same output
        effects.extend(planned)
        for effect in planned:
            state = reduce_entity(state, effect)
    r = replica()
    for message in messages:
        r.apply(message)
    assert r.entity("artists", "a1") == state
    assert state.row(ARTISTS.columns) == row(name="b")
