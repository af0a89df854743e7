"""The CRDT rules on hand-picked cases: mempool, ties, rejections, deletes, mempool bounds."""

from __future__ import annotations

import pytest

from sync.crdt import (
    Cell,
    ColumnType,
    CrdtMessage,
    CreateRecord,
    DropFromMempool,
    DropReason,
    Effect,
    EntityState,
    HoldInMempool,
    MemoryReplica,
    MempoolLimits,
    NoteUpsert,
    Operation,
    Reject,
    RejectReason,
    ReleaseFromMempool,
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


def replica(limits: MempoolLimits | None = None) -> MemoryReplica:
    return MemoryReplica(SCHEMAS, limits=limits or MempoolLimits())


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


def test_update_before_record_waits_in_mempool_then_applies() -> None:
    r = replica()
    early = update(4, "bob", plays=9, name="from-update")
    effects = r.apply(early, now_ms=100)
    assert effects == [HoldInMempool(early, 100)]
    assert r.get("artists", "a1") is None
    assert r.tables()["artists"] == {}
    assert [h.message for h in r.entity("artists", "a1").held] == [early]

    # The upsert is older than the held update, so the update's columns win; name goes to the
    # update (ts 4) even though the upsert also sets it (ts 2).
    effects = r.apply(upsert(2, "alice", name="from-upsert", score=1.5))
    assert effects[0] == CreateRecord("artists", "a1", 2, "alice", {})
    assert ReleaseFromMempool(early) in effects
    assert r.get("artists", "a1") == row(name="from-update", plays=9, score=1.5)
    assert r.entity("artists", "a1").held == ()
    assert r.counters["mempool_held"] == 1 and r.counters["mempool_released"] == 1
    # A second copy of the held update, now applied, changes nothing.
    assert r.apply(early) == []


def test_held_update_older_than_upsert_loses_on_release() -> None:
    r = replica()
    r.apply(update(1, "bob", name="stale"))
    r.apply(upsert(3, name="fresh"))
    assert r.get("artists", "a1") == row(name="fresh")


def test_duplicate_held_update_is_held_once() -> None:
    r = replica()
    message = update(1, plays=1)
    r.apply(message)
    assert r.apply(message) == []
    assert len(r.entity("artists", "a1").held) == 1


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
    assert r.apply(upsert(5, "zed", name="tie")) == [NoteUpsert("artists", "a1", 5, "zed")]
    assert r.get("artists", "a1") is None
    assert r.entity("artists", "a1").cells == {}


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


def test_delete_drops_dominated_held_updates() -> None:
    r = replica()
    old, new = update(2, plays=1), update(9, plays=2)
    r.apply(old)
    r.apply(new)
    effects = r.apply(delete(5))
    assert DropFromMempool(old, DropReason.DOMINATED) in effects
    assert [h.message for h in r.entity("artists", "a1").held] == [new]
    assert r.apply(update(4, plays=3)) == []  # dominated on arrival: not even held
    r.apply(upsert(6, name="Ana"))
    assert r.get("artists", "a1") == row(name="Ana", plays=2)


def test_mempool_cap_evicts_oldest_and_counts() -> None:
    r = replica(MempoolLimits(max_per_entity=2, max_age_ms=None))
    first, second, third = update(3, plays=3), update(5, plays=5), update(4, plays=4)
    r.apply(first)
    r.apply(second)
    assert r.apply(third) == [
        DropFromMempool(first, DropReason.EVICTED_CAP),
        HoldInMempool(third, 0),
    ]
    assert r.apply(update(1, plays=1)) == [
        DropFromMempool(update(1, plays=1), DropReason.EVICTED_CAP)
    ]
    assert [h.message for h in r.entity("artists", "a1").held] == [third, second]
    assert r.counters["mempool_dropped_evicted_cap"] == 2
    # Other entities have their own cap.
    assert r.apply(update(1, entity="a2", plays=1))[0] == HoldInMempool(
        update(1, entity="a2", plays=1), 0
    )


def test_mempool_age_limit_and_timer() -> None:
    r = replica(MempoolLimits(max_per_entity=8, max_age_ms=1000))
    assert r.get_timer() is None
    a, b = update(1, plays=1), update(2, entity="a2", plays=2)
    r.apply(a, now_ms=100)
    r.apply(b, now_ms=600)
    assert r.get_timer() == 1100
    assert r.expire(1099) == []
    assert r.expire(1100) == [DropFromMempool(a, DropReason.EVICTED_AGE)]
    assert r.get_timer() == 1600
    assert r.expire(5000) == [DropFromMempool(b, DropReason.EVICTED_AGE)]
    assert r.get_timer() is None
    assert r.state() == {}  # an entity that only held evicted updates leaves no trace
    assert r.counters["mempool_dropped_evicted_age"] == 2


def test_mempool_lamport_lag_limit() -> None:
    r = replica(MempoolLimits(max_per_entity=8, max_age_ms=None, max_lag=10))
    waiting = update(5, plays=1)
    r.apply(waiting)
    r.apply(upsert(15, entity="other", name="x"))
    assert r.expire(0) == []
    r.apply(upsert(16, entity="other", name="y"))
    assert r.expire(0) == [DropFromMempool(waiting, DropReason.EVICTED_LAG)]


def test_rejected_messages_do_not_advance_the_lag_clock() -> None:
    r = replica(MempoolLimits(max_per_entity=8, max_age_ms=None, max_lag=10))
    r.apply(update(5, plays=1))
    r.apply(upsert(100, name="x", genre="unknown column"))
    assert r.expire(0) == []


def test_mempool_limits_validation() -> None:
    with pytest.raises(ValueError):
        MempoolLimits(max_per_entity=0)
    with pytest.raises(ValueError):
        MempoolLimits(max_age_ms=-1)
    with pytest.raises(ValueError):
        MempoolLimits(max_lag=-1)


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
