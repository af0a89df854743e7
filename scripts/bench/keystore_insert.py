#!/usr/bin/env python3
"""Recon key store inserts: CPU per key of ``SummaryKeyStore`` inserts at N keys.

    .venv/bin/python scripts/bench/keystore_insert.py --n 100000 1000000

For each N: a SQLite events table of N random 70-byte keys (built once, kept under --cache and
copied per run), a summary over it whose buckets hold a seeded random ``load+1 .. 2*load`` keys
(what a node that grew by inserts holds, so splits come at the rate they do while catching up),
then ``--m`` new keys written to the table in batches of ``--batch`` and handed to
``insert_keys`` after each, as the node does after each commit (the insert, then the SQL reads
its bucket splits ask for). Only that is timed, with one summary walk after it (where a lazily
rebuilt Fenwick tree pays its rebuild).

Prints a table, then as its last line one JSON object; rows go to docs/bench/keystore_insert.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from storage import EventRecord, event_row, insert_rows, make_engine  # noqa: E402
from storage import upgrade as migrate  # noqa: E402
from storage.keystore import SqlKeyReader  # noqa: E402
from sync.recon import BucketSummary, SummaryKeyStore, insert_keys, wide_of  # noqa: E402

OUT = ROOT / "docs" / "bench" / "keystore_insert.json"
KEY_BYTES = 70
# The node's defaults ([recon] keystore_*, node/config/settings.py).
LOAD, MAX_BUCKETS, CACHE_KEYS = 256, 32768, 131_072


def _rows(keys: list[bytes]) -> list[dict[str, object]]:
    return [event_row(EventRecord(k, hashlib.sha256(k).hexdigest(), "bench", "s", 0, b""), 0)
            for k in keys]


def _database(n: int, cache: Path) -> tuple[Path, list[bytes]]:
    """A SQLite node database of ``n`` seeded keys (built once under ``cache``), and its keys."""
    rng = random.Random(n)
    keys = sorted({rng.randbytes(KEY_BYTES) for _ in range(n)})
    path = cache / f"keystore-{n}.db"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        engine = make_engine(f"sqlite:///{tmp}", sqlite_synchronous="NORMAL")
        migrate(engine)
        for i in range(0, len(keys), 20_000):
            with engine.begin() as conn:
                insert_rows(conn, _rows(keys[i : i + 20_000]))
        engine.dispose()
        tmp.rename(path)
    return path, keys


def _buckets(keys: list[bytes], seed: int) -> list[tuple[bytes, int, int]]:
    rng = random.Random(seed)
    out: list[tuple[bytes, int, int]] = []
    i = 0
    while i < len(keys):
        size = rng.randint(LOAD + 1, 2 * LOAD)
        part = keys[i : i + size]
        out.append((b"" if i == 0 else part[0], len(part), sum(map(wide_of, part))))
        i += size
    return out


def run(n: int, m: int, batch: int, cache: Path) -> dict[str, object]:
    db, keys = _database(n, cache)
    work = Path(tempfile.mkdtemp(prefix="keystore-insert-"))
    try:
        shutil.copy(db, work / "db")
        engine = make_engine(f"sqlite:///{work / 'db'}", sqlite_synchronous="NORMAL")
        summary = BucketSummary.restore(_buckets(keys, n), load=LOAD, max_buckets=MAX_BUCKETS)
        store = SummaryKeyStore(summary, cache_keys=CACHE_KEYS)
        reader = SqlKeyReader(engine)
        buckets_before = len(summary)
        rng = random.Random(n + 1)
        have = set(keys)
        del keys
        fresh = [k for k in (rng.randbytes(KEY_BYTES) for _ in range(m)) if k not in have]
        cpu = wall = 0.0
        for i in range(0, len(fresh), batch):
            part = fresh[i : i + batch]
            with engine.begin() as conn:
                insert_rows(conn, _rows(part))
            t0, c0 = time.perf_counter(), time.process_time()
            insert_keys(store, part, reader)  # the splits' reads answered, as the node does
            # The Fenwick rebuild a split leaves to the next query (sessions query between
            # commits): counted with the insert. A no-op walk when the trees are current.
            store.summary.before(len(store.summary) - 1)
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
        engine.dispose()
        if len(store) != n + len(fresh):
            raise SystemExit(f"wrong count {len(store)} != {n + len(fresh)}")
        return {
            "n": n,
            "inserted": len(fresh),
            "batch": batch,
            "insert_cpu_us_per_key": round(cpu / len(fresh) * 1e6, 2),
            "insert_wall_us_per_key": round(wall / len(fresh) * 1e6, 2),
            "splits": len(store.summary) - buckets_before,
            "buckets": len(store.summary),
            "bucket_reads": store.reads,
            "mismatched_reads": store.mismatched_reads,
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--m", type=int, default=20_000, help="new keys inserted per N")
    parser.add_argument("--batch", type=int, default=100, help="keys per insert_many")
    parser.add_argument("--cache", type=Path,
                        default=Path(tempfile.gettempdir()) / "keystore-bench")
    parser.add_argument("--label", default="", help="stored with the rows (e.g. before/after)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = [{"label": args.label} | run(n, args.m, args.batch, args.cache) for n in args.n]
    columns = [c for c in rows[0] if c != "label"]
    print(" ".join(f"{c:>22}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]!s:>22}" for c in columns))
    if not args.no_save:
        existing = json.loads(OUT.read_text())["results"] if OUT.exists() else []
        merged = {(r["label"], r["n"]): r for r in existing}
        merged.update({(r["label"], r["n"]): r for r in rows})
        note = ("CPU of insert_many only (the table writes are not timed); pure Python on a "
                "2-core machine shared with other jobs, see load_avg_1m.")
        OUT.write_text(json.dumps({"note": note, "results": list(merged.values())}, indent=1)
                       + "\n")
    print(json.dumps(rows[-1]))


if __name__ == "__main__":
    main()
