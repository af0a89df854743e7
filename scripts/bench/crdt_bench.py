"""Replicated database (Spindexer CRDT) benchmark: the SQL application on SQLite.

Three writers produce signed CRDT events on the db channel, after the table's schema declaration:
an upsert of each of ENTITIES records, then random updates and upserts of 1-3 of its 4 columns
with growing Lamport timestamps (ties and lost writes included), and a few deletes. The events
are stored in the event log first (not timed). Then:

- live: the real ``AppRunner`` applies the log while it grows, 500 events per commit, as a node
  does under steady traffic. ``cell_updates_per_s`` = column registers written (``SetCell``
  effects) per second of applying, decoding and SQL included.
- replay: a new replica (application tables and cursor dropped) rebuilds from the whole log in
  the runner's batches of 2000: ``replay_events_per_s``.

SQLite file, synchronous=FULL (the node's default). Prints a table; the last line is a JSON
object; a full run also writes docs/bench/crdt.json.

    python scripts/bench/crdt_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine, delete

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

from benchjson import finish, smoke_path  # noqa: E402

from node.apps.db_app import DbApplication  # noqa: E402
from node.apps.runner import AppRunner  # noqa: E402
from node.clock import SystemClock  # noqa: E402
from node.config.apps import DbSection  # noqa: E402
from node.store.events import EventStore  # noqa: E402
from node.store.signal import CommitSignal  # noqa: E402
from node.telemetry.metrics import Metrics  # noqa: E402
from storage import EventRecord, append_events, make_engine, node_state, upgrade  # noqa: E402
from storage.schema import crdt_cells, crdt_changes, crdt_entities, crdt_schemas  # noqa: E402
from sync.crdt import CrdtMessage, Operation, SchemaDeclaration, TableSchema, Value  # noqa: E402
from sync.identity import peer_id_of  # noqa: E402
from sync.sds import encode_event  # noqa: E402
from sync.stored_event import record_of_event  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("cell_updates_per_s", "replay_events_per_s", "messages", "cells_set",
             "cell_updates_per_cpu_s", "replay_events_per_cpu_s", "load_avg_1m")
CHANNEL = "db"
SCHEMA = TableSchema("items", {"name": "text", "qty": "integer", "price": "real",
                               "active": "boolean"})
LIVE_COMMIT = 500
BASE_LAMPORT = 1_700_000_000_000  # SDS Lamport timestamps start from epoch milliseconds


def _value(column: str, rng: random.Random) -> Value:
    if column == "name":
        return f"item-{rng.randrange(10_000)}"
    if column == "qty":
        return rng.randrange(1000)
    if column == "price":
        return rng.randrange(100_000) / 100
    return rng.random() < 0.5


def build_log(messages: int, entities: int, rng: random.Random) -> list[EventRecord]:
    keys = [Ed25519PrivateKey.from_private_bytes(hashlib.sha256(bytes([i])).digest())
            for i in range(3)]
    peers = [(k, peer_id_of(k)) for k in keys]
    columns = sorted(SCHEMA.columns)
    # The table's schema is the first event on the log, declared by its owner (writer 0).
    owner_key, owner = peers[0]
    declaration = SchemaDeclaration(SCHEMA.name, SCHEMA.columns, None, BASE_LAMPORT - 1, owner)
    out: list[EventRecord] = [record_of_event(1, encode_event(
        CHANNEL, owner, BASE_LAMPORT - 1, (), declaration.encoded, owner_key))]
    lamport = BASE_LAMPORT
    for i in range(messages):
        key, peer = rng.choice(peers)
        # Concurrent writers: timestamps mostly grow, sometimes repeat (ties) or lag behind.
        lamport += rng.choice((0, 1, 1, 1, 2))
        ts = lamport - (rng.randrange(5) if rng.random() < 0.1 else 0)
        if i < entities:
            op, entity = Operation.UPSERT, f"e{i}"
        else:
            entity = f"e{rng.randrange(entities)}"
            op = rng.choices([Operation.UPDATE, Operation.UPSERT, Operation.DELETE],
                             [80, 19, 1])[0]
        values = {} if op is Operation.DELETE else {
            c: _value(c, rng) for c in rng.sample(columns, rng.randint(1, 3))}
        content = CrdtMessage(op, SCHEMA.name, entity, values, timestamp=ts, sender=peer).encoded
        out.append(record_of_event(1, encode_event(CHANNEL, peer, ts, (), content, key)))
    return out


def wipe(engine: Engine) -> None:
    """A new replica: no application state, no change feed."""
    with engine.begin() as conn:
        for table in (crdt_cells, crdt_changes, crdt_entities, crdt_schemas, node_state):
            conn.execute(delete(table))


async def drain(runner: AppRunner) -> None:
    while await runner.step():
        pass


def run_live(engine: Engine, log: list[EventRecord],
             section: DbSection) -> tuple[float, float, Metrics]:
    """Seconds of wall clock and of process CPU spent applying, and the app's metrics."""
    metrics = Metrics()
    app = DbApplication(section, metrics, clock=SystemClock())
    runner = AppRunner(app, EventStore(engine), metrics, CommitSignal(), clock=SystemClock())
    wall = cpu = 0.0
    for start in range(0, len(log), LIVE_COMMIT):
        with engine.begin() as conn:
            append_events(conn, log[start : start + LIVE_COMMIT], int(time.time() * 1000))
        began, began_cpu = time.perf_counter(), time.process_time()
        trio.run(drain, runner)
        wall += time.perf_counter() - began
        cpu += time.process_time() - began_cpu
    assert metrics.value("app_errors_total", app="db") == 0
    return wall, cpu, metrics


def run_replay(engine: Engine, section: DbSection) -> tuple[float, float]:
    wipe(engine)
    metrics = Metrics()
    clock = SystemClock()
    runner = AppRunner(DbApplication(section, metrics, clock=clock), EventStore(engine), metrics,
                       CommitSignal(), clock=clock)
    began, began_cpu = time.perf_counter(), time.process_time()
    trio.run(drain, runner)
    wall, cpu = time.perf_counter() - began, time.process_time() - began_cpu
    assert metrics.value("app_errors_total", app="db") == 0
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run for CI")
    parser.add_argument("--smoke", action="store_true",
                        help="2,000 messages, JSON to a temp file (the make test smoke run)")
    args = parser.parse_args()
    messages, entities = ((2_000, 200) if args.smoke else (20_000, 2_000) if args.quick
                          else (100_000, 10_000))
    rng = random.Random(7)
    began = time.perf_counter()
    log = build_log(messages, entities, rng)
    build_s = time.perf_counter() - began
    section = DbSection(tables=(SCHEMA,))
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'bench.db'}")
        upgrade(engine)
        live_s, live_cpu, metrics = run_live(engine, log, section)
        replay_s, replay_cpu = run_replay(engine, section)
        engine.dispose()
    cells = int(metrics.value("db_cells_set_total"))
    load = os.getloadavg()[0]
    rows = [
        ("messages (events)", f"{messages:,}"),
        ("entities", f"{entities:,}"),
        ("column writes applied (SetCell)", f"{cells:,}"),
        ("records deleted", f"{int(metrics.value('db_records_deleted_total')):,}"),
        ("signing the log (not timed)", f"{build_s:.1f} s"),
        (f"live apply, {LIVE_COMMIT} events/commit", f"{live_s:.2f} s"),
        ("  cell updates/s", f"{cells / live_s:,.0f}"),
        ("  messages/s", f"{messages / live_s:,.0f}"),
        ("  process CPU time", f"{live_cpu:.2f} s"),
        ("  cell updates per CPU second", f"{cells / live_cpu:,.0f}"),
        ("replay from the log, 2000 events/batch", f"{replay_s:.2f} s"),
        ("  events/s", f"{messages / replay_s:,.0f}"),
        ("  process CPU time", f"{replay_cpu:.2f} s"),
        ("load average (1 min, 2 cores)", f"{load:.1f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>12}")
    result = {
        "cell_updates_per_s": round(cells / live_s),
        "replay_events_per_s": round(messages / replay_s),
        "messages": messages,
        "cells_set": cells,
        "cell_updates_per_cpu_s": round(cells / live_cpu),
        "replay_events_per_cpu_s": round(messages / replay_cpu),
        "load_avg_1m": round(load, 1),
    }
    out = (smoke_path("crdt") if args.smoke else
           None if args.quick else ROOT / "docs" / "bench" / "crdt.json")
    return finish(result, JSON_KEYS, out)


if __name__ == "__main__":
    sys.exit(main())
