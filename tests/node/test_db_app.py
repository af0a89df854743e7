"""The replicated database in one process: signed CRDT events applied by the SQL application
(``node.apps.db_app``) on SQLite (and PostgreSQL with SYNCNODE_TEST_PG), compared with each other
and with the reference ``MemoryReplica`` of ``sync.crdt``."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from node.apps.db_app import DbApplication
from node.apps.db_plugin import DbPlugin
from node.apps.runner import AppRunner
from node.clock import SystemClock
from node.config.apps import DbSection
from node.config.fields import ConfigError
from node.config.settings import Config, load_config
from node.store.events import EventStore
from node.store.signal import CommitSignal
from node.telemetry.metrics import Metrics
from storage import EventRecord, append_events, get_state, make_engine, upgrade
from sync.crdt import TableSchema, Value
from tests.harness.db_helpers import (
    ALICE,
    BOB,
    CAROL,
    DECLARED,
    PEERS,
    SCHEMAS,
    SECTION,
    Replica,
    db_url,
    engine,
    jittered,
    memory_of,
    upgraded,
    wipe,
)
from tests.storage.conftest import BACKENDS, fresh_url

__all__ = ["db_url", "engine"]  # the fixtures, shared with the other db tests

# -- convergence (hypothesis) -------------------------------------------------------------------

COLUMN_VALUES: dict[str, list[Value]] = {
    "name": ["a", "b", "zz", None], "plays": [1, 2, 10, -1, None],
    "score": [0.5, 1.0, -0.0, None], "ok": [True, False, None], "note": ["x", "y", None],
}
TABLE_COLUMNS = {"artists": ["name", "plays", "score", "ok"], "private": ["note"]}
# Schema violations every replica must reject alike (carol writing "private" is unauthorised).
CORRUPTIONS: list[tuple[str, Value]] = [("name", 3), ("plays", "x"), ("genre", "rock")]


@st.composite
def operations(draw: st.DrawFn) -> EventRecord:
    peer = draw(st.sampled_from(PEERS))
    lamport = draw(st.integers(1, 12))  # few timestamps: many ties
    if draw(st.integers(0, 30)) == 0:
        return peer.event(lamport, b'{"not":"a crdt message"}')
    table = draw(st.sampled_from(["artists", "artists", "private"]))
    op = draw(st.sampled_from(["upsert", "update", "update", "delete"]))
    entity = draw(st.sampled_from(["e0", "e1", "e2"]))
    values: dict[str, Value] = {}
    if op != "delete":
        columns = draw(st.lists(st.sampled_from(TABLE_COLUMNS[table]), min_size=op == "update",
                                max_size=3, unique=True))
        values = {c: draw(st.sampled_from(COLUMN_VALUES[c])) for c in columns}
        if draw(st.integers(0, 15)) == 0:
            column, value = draw(st.sampled_from(CORRUPTIONS))
            values[column] = value
    return peer.write(op, table, entity, lamport, **values)


@pytest.fixture(scope="module", params=BACKENDS)
def replica_engines(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Engine]]:
    """Three SQLite databases; on PostgreSQL one database, reused by the replicas in turn."""
    base = tmp_path_factory.mktemp("replicas")
    urls = ([f"sqlite:///{base / f'r{i}.db'}" for i in range(3)] if request.param == "sqlite"
            else [fresh_url("postgresql", base)])
    with upgraded(urls) as engines:
        yield engines


@st.composite
def declarations(draw: st.DrawFn) -> EventRecord:
    """A schema version of "artists" or "private" (columns added, removed or retyped, writers
    changed), or of a third table "misc" that may push one of them out (``BOUNDED`` keeps two
    tables and two versions each); mostly by alice (the owner), sometimes by bob (ignored,
    or the owner if first)."""
    table = draw(st.sampled_from(["artists", "private", "misc"]))
    columns = draw(st.dictionaries(st.sampled_from([*TABLE_COLUMNS.get(table, []), "extra"]),
                                   st.sampled_from(["text", "integer", "real", "boolean"]),
                                   max_size=4))
    writers = draw(st.none() | st.sets(st.sampled_from([p.id for p in PEERS]), min_size=1))
    peer = draw(st.sampled_from([ALICE, ALICE, ALICE, BOB]))
    return peer.declare(draw(st.integers(0, 12)), TableSchema(table, columns, writers))


WINDOW = 4
BOUNDED = {"max_schema_versions": 2, "max_tables": 2}


@settings(deadline=None, max_examples=40)
@given(events=st.lists(operations(), min_size=1, max_size=30),
       versions=st.lists(declarations(), max_size=4), seed=st.integers(0, 2**32),
       compact=st.booleans())
def test_replicas_converge_in_any_order_and_multiplicity(
    replica_engines: list[Engine], events: list[EventRecord], versions: list[EventRecord],
    seed: int, compact: bool
) -> None:
    """Three SQL replicas receive the first declarations, later schema versions, writes and
    deletes in their own orders, with duplicates and random batch sizes; with ``compact`` the
    stability window is on and the orders keep it. Tables and state end up identical to each
    other and to the reference replica's."""
    rng = random.Random(seed)
    sent = DECLARED + versions + events
    window = WINDOW if compact else 0
    expected = memory_of(sent, window, max_versions=2, max_tables=2)
    for i in range(3):
        engine = replica_engines[i % len(replica_engines)]
        wipe(engine)
        order = sent + rng.sample(sent, rng.randint(0, len(sent)))  # duplicates
        if compact:
            order = jittered(order, WINDOW, rng)
        else:
            rng.shuffle(order)
        replica = Replica(engine, DbSection(tables=SCHEMAS, stability_window=window, **BOUNDED),
                          declared=False)
        replica.feed(order, batch=rng.randint(1, len(order)))
        assert replica.states() == expected.state()
        assert replica.tables() == expected.tables()


# -- the rules through SQL ----------------------------------------------------------------------


def test_update_before_its_record_is_parked_invisibly(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([BOB.write("update", "artists", "a1", 7, plays=3, name="late")])
    assert replica.get("artists", "a1") is None
    assert replica.tables()["artists"] == {}
    replica.feed([ALICE.write("upsert", "artists", "a1", 5, name="Ana", score=1.5)])
    assert replica.get("artists", "a1") == {"name": "late", "ok": None, "plays": 3, "score": 1.5}
    state = replica.states()[("artists", "a1")]
    assert state.upserted is not None and state.upserted.sender == ALICE.id


def test_equal_timestamps_pick_the_same_winner_everywhere(
    engine: Engine, tmp_path: Path
) -> None:
    writes = [ALICE.write("upsert", "artists", "a1", 9, name="apple"),
              BOB.write("upsert", "artists", "a1", 9, name="banana"),
              CAROL.write("upsert", "artists", "a1", 9, plays=4),
              BOB.write("update", "artists", "a1", 9, plays=4)]
    other = make_engine(f"sqlite:///{tmp_path / 'other.db'}")
    upgrade(other)
    try:
        first, second = Replica(engine), Replica(other)
        first.feed(writes)
        second.feed(writes[::-1])
        for replica in (first, second):
            # The greater value text wins a tie ("banana" > "apple"); equal values: the
            # greater sender id is recorded.
            assert replica.get("artists", "a1") == {"name": "banana", "ok": None, "plays": 4,
                                                    "score": None}
            cell = replica.states()[("artists", "a1")].cells["plays"]
            assert cell.sender == max(BOB.id, CAROL.id)
        assert first.states() == second.states()
    finally:
        other.dispose()


@pytest.mark.parametrize(("event", "reason"), [
    (ALICE.write("upsert", "albums", "x", 3, title="t"), "unknown_table"),
    (ALICE.write("upsert", "artists", "x", 3, genre="rock"), "unknown_column"),
    (ALICE.write("upsert", "artists", "x", 3, plays="many"), "bad_type"),
    (ALICE.write("upsert", "artists", "x", 3, score=1), "bad_type"),
    (CAROL.write("upsert", "private", "x", 3, note="hi"), "unauthorised_writer"),
    (ALICE.event(3, b'{"crdt":1, "id":"x","op":"upsert","table":"artists","values":{}}'),
     "malformed"),
    (ALICE.event(3, b"\xff\xfe"), "malformed"),
])
def test_rejections_change_nothing_and_are_counted(
    engine: Engine, event: EventRecord, reason: str
) -> None:
    replica = Replica(engine)
    replica.feed([ALICE.write("upsert", "artists", "x", 1, name="kept")])
    before = replica.states()
    replica.feed([event])
    assert replica.states() == before
    assert replica.get("artists", "x") == {"name": "kept", "ok": None, "plays": None,
                                           "score": None}
    assert replica.counter("db_rejected_total", reason=reason) == 1
    # An authorised writer may write the restricted table.
    replica.feed([BOB.write("upsert", "private", "x", 4, note="ok")])
    assert replica.get("private", "x") == {"note": "ok"}


def test_delete_wins_ties_and_a_newer_upsert_recreates_from_scratch(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([ALICE.write("upsert", "artists", "a", 5, name="old", plays=1),
                  BOB.write("delete", "artists", "a", 5),
                  CAROL.write("update", "artists", "a", 7, plays=9)])
    assert replica.get("artists", "a") is None  # delete wins the tie; updates do not resurrect
    assert replica.counter("db_records_deleted_total") == 1
    replica.feed([ALICE.write("upsert", "artists", "a", 6, name="new")])
    assert replica.get("artists", "a") == {"name": "new", "ok": None, "plays": 9, "score": None}
    replica.feed([BOB.write("delete", "artists", "a", 3)])  # a late old delete changes nothing
    assert replica.get("artists", "a") == {"name": "new", "ok": None, "plays": 9, "score": None}


def test_no_tables_means_no_channel_and_nothing_to_apply() -> None:
    app = DbApplication(DbSection(), clock=SystemClock())
    assert app.channels == ()
    assert DbPlugin().channels(Config()) == []
    assert DbPlugin().channels(Config(db=SECTION)) == ["db"]


# -- config ------------------------------------------------------------------------------------


PEER_A = "12D3KooWNd8DXeVtTXwf8i8RpqKKr16e9W8eLnefWP4s6VvHaNLf"


def test_tables_are_declared_in_toml_or_in_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[db]\nstability_window = 3\nowners = ["users={PEER_A}"]\n[db.tables.users]\n'
                    f'columns = {{ name = "text", age = "integer" }}\nwriters = ["{PEER_A}"]\n'
                    '[db.tables.tags]\ncolumns = { label = "text" }\n')
    config = load_config(path, env={})
    assert config.db.tables == (
        TableSchema("tags", {"label": "text"}),
        TableSchema("users", {"age": "integer", "name": "text"}, writers=frozenset({PEER_A})),
    )
    assert config.db.stability_window == 3
    assert config.db.owner_pins() == {"users": PEER_A}
    # Declared order is kept (db query prints columns in it).
    assert list(config.db.tables[1].columns) == ["name", "age"]
    env = {"SYNCNODE_DB_TABLES": '{"t": {"columns": {"x": "real"}}}'}
    assert load_config(None, env=env).db.tables == (TableSchema("t", {"x": "real"}),)


@pytest.mark.parametrize(("toml", "env", "key", "fragment"), [
    ('[db.tables.users]\ncolumns = { age = "int" }\n', "", "db.tables.users", "unknown type"),
    ('[db.tables.users]\ncolumns = { id = "text" }\n', "", "db.tables.users", "reserved"),
    ('[db.tables.users]\ncolumns = { a = "text" }\nwriters = "me"\n', "",
     "db.tables.users.writers", "list of peer ids"),
    ('[db.tables.users]\ncolumn = { a = "text" }\n', "", "db.tables.users", "columns ="),
    ('[db.tables."bad name"]\ncolumns = {}\n', "", "db.tables.bad name", "not an identifier"),
    ("[db]\ntables = 3\n", "", "db.tables", "table declarations"),
    ("", "{not json", "db.tables", "JSON object"),
    ('[db]\nowners = ["users"]\n', "", "db.owners", "TABLE=PEER_ID"),
])
def test_bad_table_declarations_name_the_key(
    tmp_path: Path, toml: str, env: str, key: str, fragment: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"SYNCNODE_DB_TABLES": env} if env else {})
    assert info.value.key == key
    assert fragment in str(info.value)


# -- the real runner on the event log ----------------------------------------------------------


def log_events(n: int, seed: int) -> list[EventRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        peer = rng.choice(PEERS[:2])
        op = rng.choice(["upsert", "update", "update", "delete"]) if i else "upsert"
        values: dict[str, Value] = (
            {} if op == "delete" else {"plays": rng.randint(0, 99), "name": f"n{i}"})
        out.append(peer.write(op, "artists", f"e{rng.randint(0, 20)}", i + 1, **values))
    return out


async def run_app(engine: Engine, app: DbApplication) -> AppRunner:
    runner = AppRunner(app, EventStore(engine), Metrics(), CommitSignal(), clock=SystemClock())
    with engine.connect() as conn:
        raw = get_state(conn, "app/db/cursor")
    runner.cursor = int(raw) if raw else 0
    while await runner.step():
        pass
    assert runner.metrics.value("app_errors_total", app="db") == 0
    return runner


@pytest.mark.trio
async def test_runner_applies_the_log_and_a_new_replica_replays_it(engine: Engine) -> None:
    events = DECLARED + log_events(300, 7)
    with engine.begin() as conn:
        append_events(conn, events, 1_700_000_000_000)
    app = DbApplication(SECTION, clock=SystemClock())
    runner = await run_app(engine, app)
    assert runner.cursor == 302 and app.applied_seq == 302
    first = Replica(engine, declared=False)
    expected = memory_of(events)
    assert first.states() == expected.state()
    # Replay: drop the application's tables and cursor, start again from seq 0.
    wipe(engine, log=False)
    await run_app(engine, DbApplication(SECTION, clock=SystemClock()))
    replayed = Replica(engine, declared=False)
    replayed.apply_new()
    assert replayed.tables() == expected.tables()
