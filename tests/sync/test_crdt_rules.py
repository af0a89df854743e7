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
    MempoolLimits,
    MemoryReplica,
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
    assert cell_wins(Cell(1, "b", "a"), Cell(1, None, "z"))  # '"b"' > 'null'? no: '"' < 'n'
    assert not cell_wins(Cell(1, "b", "a"), Cell(2, "a", "a"))
    assert cell_wins(Cell(1, "b", "b"), Cell(1, "b", "a"))
    assert not cell_wins(Cell(1, "b", "a"), Cell(1, "b", "a"))
