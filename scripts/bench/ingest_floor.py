#!/usr/bin/env python3
"""Per-event CPU floor of the two ingest designs considered for issue 19, in one process.

For the events of the catch-up log (``catchup_log.py``), CPU time per event of:

* what an ingest worker process does with a batch (``sync.ingest.verify_wires``: decode, id
  and signature check, Recon key, lanes) plus pickling its answer;
* what the daemon then does: unpickle the answer, the SDS bulk path's membership checks and
  the rows, and the SQLite ``executemany`` (500 per transaction, ``synchronous=FULL``);
* for comparison, the per-event decode with and without the signature check (the in-process
  "vectorised" design would do all of the above in the daemon, the signature check in threads).

Usage: ``ingest_floor.py [N]`` (default 20,000 events). Writes docs/bench/ingest_floor.json.
"""

from __future__ import annotations

import json
import pickle
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from catchup_log import cached_log

from storage import LANE_COLUMNS, make_engine, read_channel, upgrade
from sync.ingest import IngestSpec, VerifiedBatch, verify_wires
from sync.sds import decode_event

BATCH = 500
OUT = Path(__file__).resolve().parents[2] / "docs" / "bench" / "ingest_floor.json"


def _timed(n: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    result = fn()
    return (time.process_time() - start) / n * 1e6, result


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    work = Path(tempfile.mkdtemp(prefix="ingest-floor-"))
    try:
        cached_log(work / "src", n)
        engine = make_engine(f"sqlite:///{work / 'src' / 'syncnode.db'}")
        with engine.connect() as conn:
            wires = [e.wire for e in read_channel(conn, "general", 0, n)]
        engine.dispose()
        spec = IngestSpec(1)
        chunks = [wires[i : i + BATCH] for i in range(0, n, BATCH)]
        figures: dict[str, float] = {}
        figures["decode_us"], _ = _timed(n, lambda: [decode_event(w, verify_signature=False)
                                                     for w in wires])
        figures["decode_verify_us"], _ = _timed(n, lambda: [decode_event(w) for w in wires])
        figures["worker_us"], blobs = _timed(n, lambda: [
            pickle.dumps(verify_wires(spec, c), protocol=pickle.HIGHEST_PROTOCOL)
            for c in chunks])
        figures["daemon_unpickle_us"], batches = _timed(n, lambda: [pickle.loads(b)
                                                                    for b in blobs])

        def rows() -> list[list[tuple[Any, ...]]]:
            memory: dict[str, int] = {}
            out = []
            for chunk, b in zip(chunks, batches, strict=True):
                assert isinstance(b, VerifiedBatch)
                part = []
                for i in range(len(b)):
                    if all(h in memory for h in b.histories[i]):
                        memory[b.message_ids[i]] = b.lamports[i]
                    part.append((b.keys[i], b.message_ids[i], b.channels[i], b.senders[i],
                                 b.lamports[i], chunk[i], 1, *b.lanes[i]))
                out.append(part)
            return out

        figures["daemon_rows_us"], table = _timed(n, rows)
        db = work / "fresh.db"
        upgrade(make_engine(f"sqlite:///{db}"))
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
        columns = ("recon_key", "message_id", "channel", "sender", "lamport", "wire",
                   "received_at", *LANE_COLUMNS)
        insert = (f"INSERT INTO events ({', '.join(columns)}) VALUES "
                  f"({', '.join('?' * len(columns))}) ON CONFLICT DO NOTHING")

        def store() -> None:
            for part in table:
                con.execute("BEGIN IMMEDIATE")
                con.executemany(insert, part)
                con.execute("COMMIT")

        wall = time.time()
        figures["daemon_sqlite_us"], _ = _timed(n, store)
        figures["daemon_sqlite_wall_us"] = (time.time() - wall) / n * 1e6
        con.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{n} events, CPU per event (one process):")
    for name, value in figures.items():
        print(f"  {name:24} {value:7.1f} us")
    result = {"events": n, **{k: round(v, 1) for k, v in figures.items()}}
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
