"""The replicated database in one process: signed CRDT events applied by the SQL application
(``node.db_app``) on SQLite (and PostgreSQL with SYNCNODE_TEST_PG), compared with each other
and with the reference ``MemoryReplica`` of ``sync.crdt``."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete

from node.apps import AppRunner
from node.config import Config, ConfigError, DbSection, load_config
from node.db_app import DbApplication, limits_of
from node.db_plugin import DbPlugin
from node.events import record_of_event
from node.metrics import Metrics
from node.store import EventStore
from storage import (
    EventRecord,
    StoredEvent,
    append_events,
    get_state,
    make_engine,
    node_state,
    upgrade,
)
from storage.crdt import get_row, load_all_states, query_rows
from storage.schema import crdt_cells, crdt_entities, crdt_mempool
from sync.crdt import (
    CrdtMessage,
    EntityState,
    MemoryReplica,
    Operation,
    Tables,
    TableSchema,
    Value,
    decode_message,
)
from sync.errors import RemoteProtocolError
from sync.identity import peer_id_of
from sync.sds import decode_event, encode_event
from tests.storage.conftest import BACKENDS, fresh_url

CHANNEL = "db"


class Peer:
    """A writer: its CRDT messages become signed events with the Lamport timestamp we choose."""

    def __init__(self, seed: int) -> None:
        self.key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(bytes([seed])).digest())
        self.id = peer_id_of(self.key)

    def event(self, lamport: int, content: bytes | CrdtMessage) -> StoredEvent:
        raw = content.encoded if isinstance(content, CrdtMessage) else content
        signed = encode_event(CHANNEL, self.id, lamport, (), raw, self.key)
        r = record_of_event(1, signed)
        return StoredEvent(0, r.recon_key, r.message_id, r.channel, r.sender, r.lamport,
                           r.wire, 0)

    def msg(self, op: str, table: str, entity: str, lamport: int = 0,
            **values: Value) -> CrdtMessage:
        return CrdtMessage(Operation(op), table, entity, values, timestamp=lamport,
                           sender=self.id)

    def write(self, op: str, table: str, entity: str, lamport: int,
              **values: Value) -> StoredEvent:
        return self.event(lamport, self.msg(op, table, entity, lamport, **values))


ALICE, BOB, CAROL = Peer(1), Peer(2), Peer(3)
PEERS = [ALICE, BOB, CAROL]
SCHEMAS = (
    TableSchema("artists", {"name": "text", "plays": "integer", "score": "real", "ok": "boolean"}),
    TableSchema("private", {"note": "text"}, writers=frozenset({ALICE.id, BOB.id})),
)
NO_EVICTION = DbSection(tables=SCHEMAS, mempool_max_per_entity=10_000, mempool_max_age_s=0)


class Replica:
    """A database with the application, fed batches directly (duplicates allowed)."""

    def __init__(self, engine: Engine, section: DbSection = NO_EVICTION,
                 clock: list[float] | None = None) -> None:
        self.engine = engine
        self.metrics = Metrics()
        self.clock = clock if clock is not None else [1_700_000_000.0]
        self.app = DbApplication(section, self.metrics, clock=lambda: self.clock[0])

    def feed(self, events: Sequence[StoredEvent], batch: int = 1000) -> None:
        for start in range(0, len(events), batch):
            part = events[start : start + batch]
            with self.engine.begin() as conn:
                self.app.apply(conn, part)
            self.app.after_commit(part)

    def states(self) -> dict[tuple[str, str], EntityState]:
        with self.engine.connect() as conn:
            return load_all_states(conn)

    def tables(self) -> Tables:
        out: Tables = {}
        with self.engine.connect() as conn:
            for schema in SCHEMAS:
                rows = query_rows(conn, schema.name, list(schema.columns), None, 10_000)
                out[schema.name] = {
                    r.entity_id: {c: r.values.get(c) for c in sorted(schema.columns)}
                    for r in rows
                }
        return out

    def get(self, table: str, entity: str) -> dict[str, Value] | None:
        schema = next(s for s in SCHEMAS if s.name == table)
        with self.engine.connect() as conn:
            row = get_row(conn, table, entity, list(schema.columns))
        return None if row is None else {c: row.values.get(c) for c in sorted(schema.columns)}

    def counter(self, name: str, **labels: str) -> float:
        return self.metrics.value(name, **labels)


def wipe(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in (crdt_cells, crdt_entities, crdt_mempool, node_state):
            conn.execute(delete(table))


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    eng = make_engine(fresh_url(request.param, tmp_path))
    upgrade(eng)
    yield eng
    eng.dispose()


def memory_of(events: Sequence[StoredEvent]) -> MemoryReplica:
    """The reference replica fed the same events (undecodable ones skipped)."""
    replica = MemoryReplica(SCHEMAS, limits=limits_of(NO_EVICTION))
    for event in events:
        content = decode_event(event.wire, verify_signature=False).content
        try:
            message = decode_message(content, timestamp=event.lamport, sender=event.sender)
        except RemoteProtocolError:
            continue
        replica.apply(message, now_ms=1)
    return replica


# -- convergence (hypothesis) -------------------------------------------------------------------

COLUMN_VALUES: dict[str, list[Value]] = {
    "name": ["a", "b", "zz", None], "plays": [1, 2, 10, -1, None],
    "score": [0.5, 1.0, -0.0, None], "ok": [True, False, None], "note": ["x", "y", None],
}
TABLE_COLUMNS = {"artists": ["name", "plays", "score", "ok"], "private": ["note"]}
# Schema violations every replica must reject alike (carol writing "private" is unauthorised).
CORRUPTIONS: list[tuple[str, Value]] = [("name", 3), ("plays", "x"), ("genre", "rock")]


@st.composite
def operations(draw: st.DrawFn) -> StoredEvent:
    peer = draw(st.sampled_from(PEERS))
    lamport = draw(st.integers(1, 8))  # few timestamps: many ties
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
    engines = [make_engine(url) for url in urls]
    for eng in engines:
        upgrade(eng)
    yield engines
    for eng in engines:
        eng.dispose()


@settings(deadline=None, max_examples=40)
@given(events=st.lists(operations(), min_size=1, max_size=30), seed=st.integers(0, 2**32))
def test_replicas_converge_in_any_order_and_multiplicity(
    replica_engines: list[Engine], events: list[StoredEvent], seed: int
) -> None:
    rng = random.Random(seed)
    expected = memory_of(events)
    for i in range(3):
        engine = replica_engines[i % len(replica_engines)]
        wipe(engine)
        order = list(events) + rng.sample(events, rng.randint(0, len(events)))  # duplicates
        rng.shuffle(order)
        replica = Replica(engine)
        replica.feed(order, batch=rng.randint(1, len(order)))
        assert replica.states() == expected.state()
        assert replica.tables() == expected.tables()
        assert replica.app.mempool_size == sum(len(s.held) for s in expected.state().values())


# -- the rules through SQL ----------------------------------------------------------------------


def test_update_before_its_record_waits_in_the_mempool(engine: Engine) -> None:
    replica = Replica(engine)
    replica.feed([BOB.write("update", "artists", "a1", 7, plays=3, name="late")])
    assert replica.get("artists", "a1") is None
    assert replica.app.mempool_size == 1
    assert replica.counter("db_mempool_held_total") == 1
    replica.feed([ALICE.write("upsert", "artists", "a1", 5, name="Ana", score=1.5)])
    assert replica.get("artists", "a1") == {"name": "late", "ok": None, "plays": 3, "score": 1.5}
    assert replica.app.mempool_size == 0
    assert replica.counter("db_mempool_released_total") == 1
    state = replica.states()[("artists", "a1")]
    assert not state.held and state.upserted is not None and state.upserted.sender == ALICE.id


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
    engine: Engine, event: StoredEvent, reason: str
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


def test_mempool_is_bounded_by_cap_and_age(engine: Engine) -> None:
    clock = [1_700_000_000.0]
    section = DbSection(tables=SCHEMAS, mempool_max_per_entity=2, mempool_max_age_s=60)
    replica = Replica(engine, section, clock)
    replica.feed([ALICE.write("update", "artists", "a", t, plays=t) for t in (3, 1, 2)])
    assert replica.app.mempool_size == 2
    assert replica.counter("db_mempool_dropped_total", reason="evicted_cap") == 1
    held = replica.states()[("artists", "a")].held
    assert [h.message.timestamp for h in held] == [2, 3]  # the oldest went
    clock[0] += 61
    replica.feed([ALICE.write("update", "artists", "b", 9, plays=1)])
    assert replica.counter("db_mempool_dropped_total", reason="evicted_age") == 2
    assert replica.app.mempool_size == 1
    assert set(replica.states()) == {("artists", "b")}


def test_mempool_lag_limit(engine: Engine) -> None:
    section = DbSection(tables=SCHEMAS, mempool_max_lag=10, mempool_max_age_s=0)
    replica = Replica(engine, section)
    replica.feed([ALICE.write("update", "artists", "a", 5, plays=1),
                  ALICE.write("upsert", "artists", "b", 30, plays=1)])
    replica.feed([ALICE.write("upsert", "artists", "c", 31)])
    assert replica.counter("db_mempool_dropped_total", reason="evicted_lag") == 1
    assert replica.app.mempool_size == 0


def test_no_tables_means_no_channel_and_nothing_to_apply() -> None:
    app = DbApplication(DbSection())
    assert app.channels == ()
    assert DbPlugin().channels(Config()) == []
    assert DbPlugin().channels(Config(db=NO_EVICTION)) == ["db"]


# -- config ------------------------------------------------------------------------------------


PEER_A = "12D3KooWNd8DXeVtTXwf8i8RpqKKr16e9W8eLnefWP4s6VvHaNLf"


def test_tables_are_declared_in_toml_or_in_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[db]\nmempool_max_per_entity = 3\n[db.tables.users]\n'
                    f'columns = {{ name = "text", age = "integer" }}\nwriters = ["{PEER_A}"]\n'
                    '[db.tables.tags]\ncolumns = { label = "text" }\n')
    config = load_config(path, env={})
    assert config.db.tables == (
        TableSchema("tags", {"label": "text"}),
        TableSchema("users", {"age": "integer", "name": "text"}, writers=frozenset({PEER_A})),
    )
    # Declared order is kept (db query prints columns in it).
    assert list(config.db.tables[1].columns) == ["name", "age"]
    assert limits_of(config.db).max_per_entity == 3
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


def log_events(n: int, seed: int) -> list[StoredEvent]:
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
    runner = AppRunner(app, EventStore(engine), Metrics(), trio.Event)
    with engine.connect() as conn:
        raw = get_state(conn, "app/db/cursor")
    runner.cursor = int(raw) if raw else 0
    while await runner.step():
        pass
    assert runner.metrics.value("app_errors_total", app="db") == 0
    return runner


@pytest.mark.trio
async def test_runner_applies_the_log_and_a_new_replica_replays_it(engine: Engine) -> None:
    events = log_events(300, 7)
    with engine.begin() as conn:
        append_events(conn, [EventRecord(e.recon_key, e.message_id, e.channel, e.sender,
                                         e.lamport, e.wire) for e in events], 1_700_000_000_000)
    app = DbApplication(NO_EVICTION)
    runner = await run_app(engine, app)
    assert runner.cursor == 300 and app.applied_seq == 300
    first = Replica(engine)
    expected = memory_of(events)
    assert first.states() == expected.state()
    # Replay: drop the application's tables and cursor, start again from seq 0.
    wipe(engine)
    await run_app(engine, DbApplication(NO_EVICTION))
    assert Replica(engine).tables() == expected.tables()
