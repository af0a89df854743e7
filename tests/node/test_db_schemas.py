"""Schemas on the log, re-evaluation and tombstone compaction through the SQL application
(SQLite, and PostgreSQL with SYNCNODE_TEST_PG)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete

from node.apps.db_owners import OWNERS_KEY
from node.config.apps import DbSection
from storage import EventRecord, append_events, read_channel
from storage.schema import node_state
from sync.crdt import TableSchema
from tests.harness.db_helpers import (
    ALICE,
    BOB,
    CAROL,
    DECLARED,
    PEERS,
    RECEIVED_AT,
    SCHEMAS,
    Replica,
    db_url,
    engine,
    jittered,
    memory_of,
    wipe,
)
from tests.node.test_db_app import replica_engines

__all__ = ["db_url", "engine", "replica_engines"]

ARTISTS, PRIVATE = SCHEMAS
V2 = TableSchema("artists", {**ARTISTS.columns, "genre": "text"})


def row(**cells: object) -> dict[str, object]:
    return {"name": None, "ok": None, "plays": None, "score": None, **cells}


def test_writes_that_arrive_before_their_version_are_reevaluated(engine: Engine) -> None:
    replica = Replica(engine)
    early = [BOB.write("upsert", "artists", "a", 12, name="Ana", genre="jazz"),
             CAROL.write("upsert", "private", "p", 12, note="hi")]
    replica.feed(early)
    assert replica.get("artists", "a") is None
    assert replica.counter("db_rejected_total", reason="unknown_column") == 1
    assert replica.counter("db_rejected_total", reason="unauthorised_writer") == 1
    before = replica.counter("db_tables_reevaluated_total")
    # Version 2 (declared at 10, before the writes) arrives: both become valid, no replay asked.
    replica.feed([ALICE.declare(10, V2),
                  ALICE.declare(10, TableSchema("private", {"note": "text"}, None))])
    assert replica.get("artists", "a") == {**row(name="Ana"), "genre": "jazz"}
    assert replica.get("private", "p") == {"note": "hi"}
    assert replica.counter("db_tables_reevaluated_total") == before + 2
    assert replica.states() == memory_of(DECLARED + early + [
        ALICE.declare(10, V2),
        ALICE.declare(10, TableSchema("private", {"note": "text"}, None))]).state()


def test_a_write_at_the_versions_own_time_is_judged_by_the_one_before(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([ALICE.declare(10, V2),
                  BOB.write("upsert", "artists", "tie", 10, genre="x"),
                  BOB.write("upsert", "artists", "after", 11, genre="y")])
    assert replica.get("artists", "tie") is None
    assert replica.get("artists", "after") == {**row(), "genre": "y"}


def test_type_change_hides_cells_of_the_old_type(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([ALICE.write("upsert", "artists", "a", 3, plays=7, name="Ana")])
    retyped = TableSchema("artists", {**ARTISTS.columns, "plays": "text"})
    replica.feed([ALICE.declare(5, retyped)])
    assert replica.get("artists", "a") == row(name="Ana")  # plays 7 is not a text
    replica.feed([ALICE.write("update", "artists", "a", 6, plays=8)])  # bad type now
    assert replica.get("artists", "a") == row(name="Ana")
    replica.feed([ALICE.write("update", "artists", "a", 7, plays="many")])
    assert replica.get("artists", "a") == row(name="Ana", plays="many")


def test_only_the_owner_changes_a_schema_and_pins_hold(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([BOB.declare(5, V2), BOB.write("upsert", "artists", "a", 6, genre="x")])
    assert replica.get("artists", "a") is None
    assert replica.counter("db_schema_declarations_total", outcome="not_owner") == 1
    wipe(engine)
    section = DbSection(tables=SCHEMAS, stability_window=0, owners=(f"artists={ALICE.id}",))
    pinned = Replica(engine, section, declared=False)
    pinned.feed([BOB.declare(0, V2), ALICE.declare(3, ARTISTS),
                 BOB.write("upsert", "artists", "a", 6, genre="x")])
    assert pinned.get("artists", "a") is None  # bob declared first, but alice is pinned
    assert pinned.app.book.history("artists").owner == ALICE.id  # type: ignore[union-attr]


def test_a_backdated_first_declaration_moves_the_owner_everywhere_alike(
    engine: Engine
) -> None:
    """The first declaration in log order names the owner, whenever it arrives: a late one
    (here bob's, at Lamport 2) takes the table over and every write is judged again."""
    events = [ALICE.declare(5, ARTISTS), ALICE.write("upsert", "artists", "a", 6, name="Ana"),
              ALICE.declare(7, V2), BOB.write("upsert", "artists", "b", 8, genre="x")]
    replica = Replica(engine, declared=False)
    replica.feed(events)
    assert replica.get("artists", "b") == {**row(), "genre": "x"}
    takeover = BOB.declare(2, TableSchema("artists", {"name": "integer"}))
    replica.feed([takeover])
    assert replica.app.book.history("artists").owner == BOB.id  # type: ignore[union-attr]
    assert replica.tables() == {"artists": {}}  # "Ana" is no integer; genre is unknown
    expected = memory_of([*events, takeover])
    assert replica.states() == expected.state() and replica.tables() == expected.tables()
    assert replica.counter("db_schema_declarations_total", outcome="rescan") == 1


def test_a_takeover_after_the_owner_settled_is_refused_live_after_restart_and_on_replay(
    engine: Engine
) -> None:
    """The same late declaration, once alice's ownership settled on this node (db.settle_ms
    after it stored her declaration): refused as a takeover, counted, reported for a penalty;
    a restarted application and a replay of the log from scratch judge it the same way."""
    section = DbSection(tables=SCHEMAS, stability_window=0, settle_ms=1000)
    events = [ALICE.declare(5, ARTISTS), ALICE.write("upsert", "artists", "a", 6, name="Ana")]
    penalised: list[str] = []
    replica = Replica(engine, section, declared=False, on_takeover=penalised.append)
    replica.feed(events)
    takeover = BOB.declare(2, TableSchema("artists", {"name": "integer"}))
    replica.feed([takeover, BOB.declare(9, V2)], received_at=RECEIVED_AT + 1000)
    assert replica.app.book.history("artists").owner == ALICE.id  # type: ignore[union-attr]
    assert replica.get("artists", "a") == row(name="Ana")
    assert replica.counter("db_schema_declarations_total", outcome="takeover") == 1
    assert replica.counter("db_schema_declarations_total", outcome="not_owner") == 1
    assert penalised == [BOB.id]
    expected = replica.tables()
    restarted = Replica(engine, section, declared=False)
    restarted.cursor = replica.cursor
    with engine.connect() as conn:
        restarted.app.restore(conn, replica.cursor)
    assert restarted.app.book.settled == {"artists": ALICE.id}
    restarted.feed([BOB.declare(1, ARTISTS)], received_at=RECEIVED_AT + 5000)
    assert restarted.tables() == expected
    wipe(engine, log=False)
    replay = Replica(engine, section, declared=False)
    replay.apply_new(batch=1)
    assert replay.app.book.history("artists").owner == ALICE.id  # type: ignore[union-attr]
    assert replay.tables() == expected
    assert replay.counter("db_schema_declarations_total", outcome="takeover") == 2


def test_a_table_known_before_first_seen_times_were_kept_counts_as_long_known(
    engine: Engine
) -> None:
    """A database from before this release has tables but no first-seen times: on restore they
    count as known for long, so the next foreign claim finds the owner settled."""
    section = DbSection(tables=SCHEMAS, stability_window=0, settle_ms=1000)
    old = Replica(engine, section, declared=False)
    old.feed([ALICE.declare(5, ARTISTS)])
    with engine.begin() as conn:
        conn.execute(delete(node_state).where(node_state.c.key == OWNERS_KEY))
    upgraded = Replica(engine, section, declared=False)
    upgraded.cursor = old.cursor
    with engine.connect() as conn:
        upgraded.app.restore(conn, old.cursor)
    upgraded.feed([BOB.declare(2, ARTISTS)])  # at the same receipt time as alice's
    assert upgraded.app.book.history("artists").owner == ALICE.id  # type: ignore[union-attr]
    assert upgraded.counter("db_schema_declarations_total", outcome="takeover") == 1


WINDOW = 3


@st.composite
def churn(draw: st.DrawFn) -> list[EventRecord]:
    """Upserts, updates and deletes of a few records over a growing Lamport range."""
    out = []
    for lamport in range(1, draw(st.integers(10, 40))):
        peer = draw(st.sampled_from(PEERS[:2]))
        op = draw(st.sampled_from(["upsert", "update", "delete", "delete"]))
        entity = f"e{draw(st.integers(0, 4))}"
        values = {} if op == "delete" else {"plays": lamport}
        out.append(peer.write(op, "artists", entity, lamport, **values))
    return out


@settings(deadline=None, max_examples=25)
@given(events=churn(), seed=st.integers(0, 2**32), cut=st.floats(0, 1))
def test_a_replica_joining_through_a_snapshot_and_recon_matches_after_compaction(
    replica_engines: list[Engine], events: list[EventRecord], seed: int, cut: float
) -> None:
    """A compacts tombstones as it goes (deliveries keep the stability window). B joins later:
    it loads A's log up to a cut (the snapshot), then Recon stores everything else in any
    order, and its application catches up. Both end with the same tables and state, and the
    tombstones older than the window are gone on both."""
    rng = random.Random(seed)
    section = DbSection(tables=SCHEMAS, stability_window=WINDOW)
    first, second = replica_engines[0], replica_engines[-1]
    wipe(first)
    a = Replica(first, section)
    a.feed(jittered(events, WINDOW, rng), batch=rng.randint(1, 8))
    with first.connect() as conn:
        log = read_channel(conn, "db", 0, 100_000)
        expected_states, expected_tables = a.states(), a.tables()
    records = [EventRecord(e.recon_key, e.message_id, e.channel, e.sender, e.lamport, e.wire)
               for e in log]
    k = int(len(records) * cut)
    wipe(second)  # (on PostgreSQL the same database as A's, now read)
    b = Replica(second, section, declared=False)
    with second.begin() as conn:  # the snapshot: bulk-loaded into an empty database
        append_events(conn, records[:k], 0)
    b.apply_new(batch=rng.randint(1, 50))
    rest = records[k:]
    rng.shuffle(rest)
    with second.begin() as conn:  # Recon: whatever the snapshot lacked, in any order
        append_events(conn, rest, 0)
    b.apply_new(batch=rng.randint(1, 50))
    assert b.tables() == expected_tables
    assert b.states() == expected_states
    newest = max(e.lamport for e in events)
    old = [s for s in memory_of(DECLARED + events).state().values()
           if s.deleted and s.deleted.timestamp <= newest - WINDOW]
    assert a.counter("db_tombstones_compacted_total") >= len(old)
    assert not any(s.deleted and s.deleted.timestamp <= newest - WINDOW
                   for s in expected_states.values())


def test_tombstones_past_the_window_are_compacted_and_counted_exactly_once(
    engine: Engine
) -> None:
    """Three deletes at Lamport 20, 21 and 22, a window of 3: each tombstone is forgotten
    once the table's newest write is 3 past it, and counted then, once."""
    replica = Replica(engine, DbSection(tables=SCHEMAS, stability_window=WINDOW))
    compacted = "db_tombstones_compacted_total"
    replica.feed([ALICE.write("upsert", "artists", f"e{i}", 10 + i, plays=i) for i in range(4)])
    replica.feed([ALICE.write("delete", "artists", f"e{i}", 20 + i) for i in range(3)])
    assert replica.counter("db_tombstones_total") == 3
    assert replica.counter(compacted) == 0  # newest 22: horizon 19, none is older
    replica.feed([ALICE.write("update", "artists", "e3", 24, plays=9)])  # horizon 21
    assert replica.counter(compacted) == 2
    replica.feed([ALICE.write("update", "artists", "e3", 100, plays=10)])
    assert replica.counter(compacted) == 3
    replica.feed([ALICE.write("update", "artists", "e3", 200, plays=11)])
    assert replica.counter(compacted) == 3  # nothing left to forget, nothing counted twice
    assert not any(s.deleted for s in replica.states().values())
    assert replica.tables()["artists"] == {"e3": row(plays=11)}


def test_a_restarted_node_keeps_its_schema_versions(engine: Engine) -> None:
    first = Replica(engine)
    first.feed([ALICE.declare(10, V2)])
    again = Replica(engine, declared=False)  # a new application on the same database
    again.cursor = first.cursor
    again.feed([BOB.write("upsert", "artists", "a", 12, genre="x")])
    assert again.get("artists", "a") == {**row(), "genre": "x"}
    assert again.app.book.declarations("artists") == first.app.book.declarations("artists")
    assert again.app.book.tables() == ["artists", "private"]
