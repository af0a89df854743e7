"""The change feed of the replicated tables (``crdt_changes``) on real SQLite (and PostgreSQL
with SYNCNODE_TEST_PG): one change per visible row change, ids that only grow, resets after
schema changes, a subscriber that folds the feed holds the table, and pruning that is told."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from node.config.apps import DbSection
from storage.crdt import query_rows
from storage.crdt_changes import StoredChange, change_horizon, newest_change, read_row_changes
from sync.crdt import TableSchema, Value
from tests.harness.db_helpers import ALICE, BOB, SCHEMAS, SECTION, Replica, db_url, engine, wipe
from tests.node.test_db_app import operations

__all__ = ["db_url", "engine"]  # the fixtures


def changes(replica: Replica, table: str, since: int = 0) -> list[StoredChange]:
    with replica.engine.connect() as conn:
        return read_row_changes(conn, table, since, 100_000)


def test_each_visible_change_is_one_change_and_losers_make_none(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([
        ALICE.write("upsert", "artists", "a1", 5, name="Ana"),
        BOB.write("update", "artists", "a2", 6, plays=3),  # its record is still to come
        ALICE.write("update", "artists", "a1", 4, name="older"),  # loses to lamport 5
    ])
    replica.feed([ALICE.write("update", "artists", "a1", 7, plays=2)])
    replica.feed([ALICE.write("delete", "artists", "a1", 8),
                  BOB.write("upsert", "artists", "a3", 9, ok=True),
                  BOB.write("update", "artists", "a3", 10, score=0.5)])  # one change for a3
    replica.feed([ALICE.write("delete", "artists", "nope", 11)])  # nothing visible changed
    got = [(c.kind, c.entity_id, c.row, c.lamport, c.sender) for c in changes(replica, "artists")]
    assert got == [
        ("upsert", "a1", {"name": "Ana", "ok": None, "plays": None, "score": None}, 5, ALICE.id),
        ("upsert", "a1", {"name": "Ana", "ok": None, "plays": 2, "score": None}, 7, ALICE.id),
        ("delete", "a1", None, 8, ALICE.id),
        ("upsert", "a3", {"name": None, "ok": True, "plays": None, "score": 0.5}, 10, BOB.id),
    ]
    ids = [c.change_id for c in changes(replica, "artists")]
    assert ids == sorted(set(ids))
    assert changes(replica, "artists", since=ids[1])[0].change_id == ids[2]
    assert changes(replica, "private") == []


def test_a_schema_change_resets_its_table_and_ids_never_go_back(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([ALICE.write("upsert", "artists", "a1", 5, name="Ana")])
    first = newest_change_of(replica)
    # Version 2 drops "score" and adds "genre": the table is re-derived from the log.
    replica.feed([ALICE.declare(6, TableSchema("artists", {"name": "text", "genre": "text"}))])
    replica.feed([ALICE.write("upsert", "artists", "a2", 7, genre="jazz")])
    kinds = [(c.kind, c.entity_id) for c in changes(replica, "artists", since=first)]
    assert kinds == [("reset", None), ("upsert", "a2")]
    reset = changes(replica, "artists", since=first)[0]
    assert (reset.lamport, reset.sender) == (6, ALICE.id)
    assert changes(replica, "artists")[-1].row == {"genre": "jazz", "name": None}


def newest_change_of(replica: Replica) -> int:
    with replica.engine.connect() as conn:
        return newest_change(conn)


def test_only_the_newest_changes_are_kept_and_the_pruned_horizon_is_told(engine: Engine) -> None:
    replica = Replica(engine, DbSection(tables=SCHEMAS, stability_window=0, changes_retain=3))
    for i in range(10):
        replica.feed([ALICE.write("upsert", "artists", f"a{i}", 10 + i, plays=i)])
    kept = changes(replica, "artists")
    assert [c.entity_id for c in kept] == ["a7", "a8", "a9"]
    with engine.connect() as conn:
        assert change_horizon(conn) == kept[0].change_id - 1
    # Pruning the oldest never reuses an id: the next change still goes up.
    replica.feed([ALICE.write("delete", "artists", "a9", 30)])
    assert changes(replica, "artists")[-1].change_id == kept[-1].change_id + 1


def fold(replica: Replica, table: str) -> dict[str, dict[str, Value]]:
    """What a subscriber holds after reading the whole feed from 0: on a reset it reads the
    table again (as it is when it reads), then goes on with the changes after the reset."""
    held: dict[str, dict[str, Value]] = {}
    for change in changes(replica, table):
        if change.kind == "reset":
            held = dict(replica.tables()[table])
        elif change.kind == "upsert":
            assert change.row is not None
            held[str(change.entity_id)] = change.row
        else:
            held.pop(str(change.entity_id), None)
    return held


# The engine is wiped at the start of every example.
@settings(deadline=None, max_examples=30,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(operations(), min_size=1, max_size=30), seed=st.integers(0, 2**32),
       redeclare=st.booleans())
def test_a_subscriber_folding_the_feed_holds_the_table(
    engine: Engine, events: list, seed: int, redeclare: bool
) -> None:
    """Writes in any order and batch sizes, with duplicates (and a schema change mid-way): the
    feed folded in change id order equals the table."""
    wipe(engine)
    rng = random.Random(seed)
    order = events + rng.sample(events, rng.randint(0, len(events)))
    rng.shuffle(order)
    if redeclare:
        order.insert(rng.randint(0, len(order)), ALICE.declare(
            6, TableSchema("artists", {"name": "text", "plays": "integer", "genre": "text"})))
    replica = Replica(engine, SECTION)
    replica.feed(order, batch=rng.randint(1, len(order)))
    for table in ("artists", "private"):
        feed = changes(replica, table)
        assert [c.change_id for c in feed] == sorted({c.change_id for c in feed})
        assert fold(replica, table) == replica.tables()[table]


def test_where_filters_rows_by_typed_cells_and_null(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([ALICE.write("upsert", "artists", "a1", 5, name="Ana", plays=3, score=1.0),
                  ALICE.write("upsert", "artists", "a2", 5, name="Bo", plays=3),
                  ALICE.write("upsert", "artists", "a3", 5, name="Ana", ok=False),
                  ALICE.write("upsert", "artists", "a4", 5, name="Ana", ok=None)])
    epochs = {"name": -1, "plays": -1, "score": -1, "ok": -1}

    def ids(**where: Value) -> list[str]:
        with engine.connect() as conn:
            return [r.entity_id for r in query_rows(conn, "artists", epochs, None, 100, where)]

    assert ids(name="Ana") == ["a1", "a3", "a4"]
    assert ids(name="Ana", plays=3) == ["a1"]
    assert ids(score=1.0) == ["a1"]
    assert ids(ok=False) == ["a3"]
    assert ids(ok=None) == ["a1", "a2", "a4"]  # unwritten or written NULL
    assert ids(id="a2") == ["a2"]
    assert ids(plays=4) == []
