"""Shared helpers of the replicated database tests: signing writers, SQL replicas that store
events in the log and apply them with ``node.apps.db_app``, and the reference replica fed alike."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine, delete

from node.apps.db_app import DbApplication
from node.clock import SystemClock
from node.config.apps import DbSection
from node.telemetry.metrics import Metrics
from storage import (
    EventRecord,
    append_events,
    make_engine,
    node_state,
    read_channel,
    upgrade,
)
from storage.crdt import get_row, load_all_states, query_rows
from storage.schema import crdt_cells, crdt_changes, crdt_entities, crdt_schemas, events
from sync.crdt import (
    CrdtMessage,
    EntityState,
    MemoryReplica,
    Operation,
    SchemaDeclaration,
    Tables,
    TableSchema,
    Value,
    decode_content,
)
from sync.errors import RemoteProtocolError
from sync.identity import peer_id_of
from sync.sds import decode_event, encode_event
from sync.stored_event import record_of_event
from tests.storage.conftest import db_url, engine  # the fixtures, for the db tests

__all__ = ["db_url", "engine"]

CHANNEL = "db"
RECEIVED_AT = 1_700_000_000_000


class Peer:
    """A writer: its CRDT messages become signed events with the Lamport timestamp we choose."""

    def __init__(self, seed: int) -> None:
        self.key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(bytes([seed])).digest())
        self.id = peer_id_of(self.key)

    def event(self, lamport: int, content: bytes | CrdtMessage | SchemaDeclaration
              ) -> EventRecord:
        raw = content if isinstance(content, bytes) else content.encoded
        return record_of_event(1, encode_event(CHANNEL, self.id, lamport, (), raw, self.key))

    def msg(self, op: str, table: str, entity: str, lamport: int = 0,
            **values: Value) -> CrdtMessage:
        return CrdtMessage(Operation(op), table, entity, values, timestamp=lamport,
                           sender=self.id)

    def write(self, op: str, table: str, entity: str, lamport: int,
              **values: Value) -> EventRecord:
        return self.event(lamport, self.msg(op, table, entity, lamport, **values))

    def declare(self, lamport: int, schema: TableSchema) -> EventRecord:
        return self.event(lamport, SchemaDeclaration(schema.name, schema.columns,
                                                     schema.writers, lamport, self.id))


ALICE, BOB, CAROL = Peer(1), Peer(2), Peer(3)
PEERS = [ALICE, BOB, CAROL]
SCHEMAS = (
    TableSchema("artists", {"name": "text", "plays": "integer", "score": "real", "ok": "boolean"}),
    TableSchema("private", {"note": "text"}, writers=frozenset({ALICE.id, BOB.id})),
)
# Alice owns both tables, declared at Lamport 0: every write at 1 or later is judged by them.
DECLARED = [ALICE.declare(0, s) for s in SCHEMAS]
SECTION = DbSection(tables=SCHEMAS, stability_window=0)


class Replica:
    """A database with the application: ``feed`` stores events in the log (duplicates are
    dropped there, as on a node) and applies what is new, in batches of ``batch``."""

    def __init__(self, engine: Engine, section: DbSection = SECTION, *,
                 declared: bool = True, on_takeover: Callable[[str], object] | None = None
                 ) -> None:
        self.engine = engine
        self.metrics = Metrics()
        self.app = DbApplication(section, self.metrics, clock=SystemClock(),
                                 on_takeover=on_takeover)
        self.cursor = 0
        if declared:
            self.feed(DECLARED)

    def feed(self, records: Sequence[EventRecord], batch: int = 1000,
             received_at: int = RECEIVED_AT) -> None:
        for start in range(0, len(records), batch):
            with self.engine.begin() as conn:
                append_events(conn, list(records[start : start + batch]), received_at)
            self.apply_new(batch)

    def apply_new(self, batch: int = 1000) -> None:
        while True:
            with self.engine.begin() as conn:
                stored = read_channel(conn, CHANNEL, self.cursor, batch)
                if stored:
                    self.app.apply(conn, stored)
            if not stored:
                return
            self.app.after_commit(stored)
            self.cursor = stored[-1].seq

    def states(self) -> dict[tuple[str, str], EntityState]:
        with self.engine.connect() as conn:
            return load_all_states(conn)

    def _epochs(self, table: str) -> dict[str, int]:
        schema = self.app.book.latest(table)
        assert schema is not None
        epochs = self.app.book.epochs(table)
        return {c: epochs.get(c, -1) for c in schema.columns}

    def tables(self) -> Tables:
        out: Tables = {}
        with self.engine.connect() as conn:
            for table in self.app.book.tables():
                epochs = self._epochs(table)
                rows = query_rows(conn, table, epochs, None, 10_000)
                out[table] = {r.entity_id: {c: r.values.get(c) for c in sorted(epochs)}
                              for r in rows}
        return out

    def get(self, table: str, entity: str) -> dict[str, Value] | None:
        epochs = self._epochs(table)
        with self.engine.connect() as conn:
            row = get_row(conn, table, entity, epochs)
        return None if row is None else {c: row.values.get(c) for c in sorted(epochs)}

    def counter(self, name: str, **labels: str) -> float:
        return self.metrics.value(name, **labels)


@contextmanager
def upgraded(urls: Sequence[str]) -> Iterator[list[Engine]]:
    """Engines of ``urls`` with the schema migrated, disposed of at the end."""
    engines = [make_engine(url) for url in urls]
    try:
        for eng in engines:
            upgrade(eng)
        yield engines
    finally:
        for eng in engines:
            eng.dispose()


def wipe(engine: Engine, *, log: bool = True) -> None:
    """Drop the application's tables and state (and, with ``log``, the event log)."""
    with engine.begin() as conn:
        for table in (crdt_cells, crdt_entities, crdt_schemas, crdt_changes, node_state,
                      *((events,) if log else ())):
            conn.execute(delete(table))


def memory_of(records: Sequence[EventRecord], window: int = 0, *, max_versions: int = 64,
              max_tables: int = 256) -> MemoryReplica:
    """The reference replica fed the same events (undecodable ones skipped), compacted with
    ``window`` at the end (0: not at all)."""
    replica = MemoryReplica(max_versions=max_versions, max_tables=max_tables)
    for record in records:
        content = decode_event(record.wire, verify_signature=False).content
        try:
            item = decode_content(content, timestamp=record.lamport, sender=record.sender)
        except RemoteProtocolError:
            continue
        replica.apply(item)
    if window:
        replica.compact(window)
    return replica


def jittered(records: Sequence[EventRecord], window: int, rng: random.Random
             ) -> list[EventRecord]:
    """A random delivery order that keeps the stability window: each event is delivered
    before anything ``window`` Lamport ticks newer (sort by Lamport plus a jitter < window)."""
    keyed = [(r.lamport + rng.random() * window, i) for i, r in enumerate(records)]
    return [records[i] for _, i in sorted(keyed)]
