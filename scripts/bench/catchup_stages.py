#!/usr/bin/env python3
"""CPU cost per event of each stage a Recon-fetched event goes through, in one process.

Backs the catch-up analysis in docs/bench/cluster.md: it times (CPU time of this process, so
that other jobs on the machine inflate it less than wall time) decoding, signature checking,
the Recon key, ``SdsChannel.receive``, and three ways of storing the records:

* ``append_events`` once per event: what ``EventStore._commit`` does during a catch-up, since
  ``FetchedIngest.ingest`` submits each delivered event as its own pending write;
* ``append_events`` once per 512 events (one call per writer batch);
* one cached ``INSERT .. ON CONFLICT DO NOTHING RETURNING`` statement run with executemany
  (SQLAlchemy's insertmanyvalues), the proposed replacement for the multi-VALUES statement
  that ``append_events`` builds and compiles anew for every call. Only an experiment here: the
  rows are those ``append_events`` would write.

Usage: ``catchup_stages.py [N]`` (default 5,000 events).
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine
from sqlalchemy.dialects import sqlite

sys.path.insert(0, str(Path(__file__).resolve().parent))

from catchup_log import build_log

from storage import (
    LANE_COLUMNS,
    EventRecord,
    append_events,
    events,
    make_engine,
    read_channel,
    upgrade,
)
from sync.identity import peer_id_of
from sync.recon.sha256a import lanes_of
from sync.sds import SdsChannel, decode_event
from sync.stored_event import record_of_event

BATCH = 512


def _engine(directory: Path) -> Engine:
    engine = make_engine(f"sqlite:///{directory / 'syncnode.db'}", sqlite_synchronous="FULL")
    upgrade(engine)
    return engine


def _timed(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5_000
    work = Path(tempfile.mkdtemp(prefix="catchup-stages-"))
    build_log(work / "src", n)
    source = make_engine(f"sqlite:///{work / 'src' / 'syncnode.db'}")
    with source.connect() as conn:
        wires = [e.wire for e in read_channel(conn, "general", 0, n)]
    source.dispose()
    parsed = [decode_event(w, verify_signature=False) for w in wires]
    parsed.sort(key=lambda e: e.lamport or 0)
    wires = [e.wire for e in parsed]
    records = [record_of_event(1, e) for e in parsed]
    key = Ed25519PrivateKey.generate()
    channel = SdsChannel("general", peer_id_of(key), key, None, random.Random(1), 1.0)

    def receive_all() -> None:
        for w in wires:
            channel.receive(w, 2.0)

    def one_per_call() -> None:
        engine = _engine(Path(tempfile.mkdtemp(dir=work)))
        for i in range(0, n, BATCH):
            with engine.begin() as conn:
                for record in records[i : i + BATCH]:
                    append_events(conn, [record], 1)

    def batched() -> None:
        engine = _engine(Path(tempfile.mkdtemp(dir=work)))
        for i in range(0, n, BATCH):
            with engine.begin() as conn:
                append_events(conn, records[i : i + BATCH], 1)

    def executemany() -> None:
        engine = _engine(Path(tempfile.mkdtemp(dir=work)))
        stmt = (sqlite.insert(events).on_conflict_do_nothing()
                .returning(events.c.seq, events.c.message_id))
        for i in range(0, n, BATCH):
            with engine.begin() as conn:
                conn.execute(stmt, [_row(r) for r in records[i : i + BATCH]]).all()

    stages = [
        ("decode_event, no signature check", lambda: [decode_event(w, verify_signature=False)
                                                       for w in wires]),
        ("decode_event with signature check", lambda: [decode_event(w) for w in wires]),
        ("record_of_event (Recon key)", lambda: [record_of_event(1, e) for e in parsed]),
        ("SdsChannel.receive (decode, verify, deliver)", receive_all),
        ("append_events, 1 event per call (today)", one_per_call),
        (f"append_events, {BATCH} events per call", batched),
        (f"executemany RETURNING, {BATCH} per call", executemany),
    ]
    print(f"{n} events, CPU time of this process per event:")
    try:
        for name, fn in stages:
            seconds = _timed(fn)
            print(f"  {name:46} {seconds / n * 1e6:7.0f} us  ({n / seconds:8.0f} events/s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _row(r: EventRecord) -> dict[str, object]:
    row: dict[str, object] = {
        "recon_key": r.recon_key, "message_id": r.message_id, "channel": r.channel,
        "sender": r.sender, "lamport": r.lamport, "wire": r.wire, "received_at": 1,
    }
    row.update(zip(LANE_COLUMNS, lanes_of(r.recon_key), strict=True))
    return row


if __name__ == "__main__":
    main()
