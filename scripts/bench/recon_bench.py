#!/usr/bin/env python3
"""Recon benchmark: two key stores of N random 70-byte keys, D keys unique to each side.

    .venv/bin/python scripts/bench/recon_bench.py --n 1000000 --d 1000
    .venv/bin/python scripts/bench/recon_bench.py --grid      # every N x D, writes the JSON file
    .venv/bin/python scripts/bench/recon_bench.py --store summary --n 1000000 --d 1000

``--store memory`` (default) uses ``MemoryKeyStore``; ``--store summary`` the node's store, a
``SummaryKeyStore`` over a SQLite events table (keys written first; ``build_seconds_per_store``
is then the start-up scan), with its rows in the JSON under ``"store": "summary"``.

Prints a table, then as its last line one JSON object (the last configuration's with --grid);
results are also written to docs/bench/recon.json (merged by (n, d) with what is there).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

from benchjson import finish, smoke_path  # noqa: E402

from sync.recon import (  # noqa: E402
    KeyReader,
    KeyStore,
    MemoryKeyStore,
    ReconConfig,
    SummaryKeyStore,
    answered,
    reconcile_in_memory,
)

#: The keys of the JSON result, one (N, D) row (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("n", "d", "round_trips", "messages", "bytes_total", "seconds", "cpu_seconds",
             "range_hash_us", "store_overhead_bytes_per_key")
KEY_BYTES = 70
OUT = Path(__file__).resolve().parents[2] / "docs" / "bench" / "recon.json"
GRID_N = (10_000, 100_000, 1_000_000)
GRID_D = (0, 1, 100, 1_000, 10_000)
# The node's defaults ([recon] keystore_*, node/config/settings.py).
LOAD, MAX_BUCKETS, CACHE_KEYS = 256, 32768, 131_072


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _keys(n: int, d: int, seed: int) -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(seed)
    unique: set[bytes] = set()
    while len(unique) < n + d:
        unique.add(rng.randbytes(KEY_BYTES))
    # In the seeded stream's order: a set's own order follows the process's hash seed, and the
    # two sides' keys (and so every byte figure) changed from run to run.
    pool = rng.sample(sorted(unique), len(unique))
    common, a_only, b_only = pool[: n - d], pool[n - d : n], pool[n:]
    return sorted(common + a_only), sorted(common + b_only)


def _range_hash_us(store: KeyStore, seed: int, queries: int = 20_000,
                   reader: KeyReader | None = None) -> tuple[float, float]:
    """Mean (wall, CPU) microseconds of one range hash between random bounds (a store that
    asks for its reads has them answered from ``reader``, as its driver would)."""
    rng = random.Random(seed)
    bounds = [sorted((rng.randbytes(4), rng.randbytes(4))) for _ in range(queries)]
    start, cpu_start = time.perf_counter(), time.process_time()
    for lo, hi in bounds:
        if isinstance(store, SummaryKeyStore) and reader is not None:
            answered(store, reader, functools.partial(store.range_hash, lo, hi))
        else:
            store.range_hash(lo, hi)
    wall = (time.perf_counter() - start) / queries * 1e6
    return wall, (time.process_time() - cpu_start) / queries * 1e6


def _summary_bytes(store: SummaryKeyStore) -> int:
    """Bytes of the in-memory summary and of the cached bucket reads."""
    summary = store.summary
    total = sum(sys.getsizeof(x) for x in (summary.starts, summary.counts, summary.wides))
    total += sum(sys.getsizeof(k) for k in summary.starts)
    total += sum(sys.getsizeof(v) for v in (*summary.counts, *summary.wides))
    for tree in (summary._hashes.tree, summary._ranks.tree):
        total += sys.getsizeof(tree) + sum(sys.getsizeof(v) for v in tree)
    for keys, sums in store._cache.values():
        total += sys.getsizeof(keys) + sum(sys.getsizeof(k) for k in keys)
        for run in sums:
            total += sys.getsizeof(run) + sum(sys.getsizeof(p) for p in run)
    return total


def _sql_store(keys: list[bytes], path: Path) -> tuple[SummaryKeyStore, KeyReader, float]:
    """The keys written to a fresh SQLite node database; (store, the reader that answers its
    reads, seconds of its start-up scan)."""
    from storage import (
        EventRecord,
        SqlKeyReader,
        event_row,
        insert_rows,
        make_engine,
        open_summary_store,
    )
    from storage import upgrade as migrate

    engine = make_engine(f"sqlite:///{path}", sqlite_synchronous="NORMAL")
    migrate(engine)
    for i in range(0, len(keys), 20_000):
        rows = [event_row(EventRecord(k, hashlib.sha256(k).hexdigest(), "bench", "s", 0, b""), 0)
                for k in keys[i : i + 20_000]]
        with engine.begin() as conn:
            insert_rows(conn, rows)
    t0 = time.perf_counter()
    store = open_summary_store(engine, load=LOAD, max_buckets=MAX_BUCKETS, cache_keys=CACHE_KEYS)
    return store, SqlKeyReader(engine), time.perf_counter() - t0


def run(n: int, d: int, seed: int, config: ReconConfig, kind: str = "memory") -> dict[str, object]:
    if d > n:
        raise SystemExit("d must not exceed n")
    a_keys, b_keys = _keys(n, d, seed)
    a: MemoryKeyStore | SummaryKeyStore
    b: MemoryKeyStore | SummaryKeyStore
    if kind == "summary":
        work = Path(tempfile.mkdtemp(prefix="recon-bench-"))
        try:
            a, reader_a, seconds_a = _sql_store(a_keys, work / "a.db")
            b, reader_b, seconds_b = _sql_store(b_keys, work / "b.db")
            build_seconds = (seconds_a + seconds_b) / 2
            del a_keys, b_keys
            return _measure(a, b, n, d, seed, config, build_seconds, kind, (reader_a, reader_b))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    a = MemoryKeyStore.from_sorted(a_keys)
    b = MemoryKeyStore.from_sorted(b_keys)
    build_seconds = (time.perf_counter() - t0) / 2
    del a_keys, b_keys
    return _measure(a, b, n, d, seed, config, build_seconds, kind)


def _measure(a: MemoryKeyStore | SummaryKeyStore, b: MemoryKeyStore | SummaryKeyStore, n: int,
             d: int, seed: int, config: ReconConfig, build_seconds: float, kind: str,
             readers: tuple[KeyReader | None, KeyReader | None] = (None, None),
             ) -> dict[str, object]:
    everything = [(b"", b"\xff" * (KEY_BYTES + 1))]
    start, cpu_start = time.perf_counter(), time.process_time()
    result = reconcile_in_memory(a, b, everything, everything, config, apply=False,
                                 readers=readers)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    if len(result.initiator_missing) != d or len(result.responder_missing) != d:
        raise SystemExit(
            f"wrong result: {len(result.initiator_missing)}/{len(result.responder_missing)} != {d}"
        )
    if sorted(result.initiator_peer_missing) != sorted(result.responder_missing):
        raise SystemExit("initiator's view of what the responder lacks is wrong")
    rh_wall, rh_cpu = _range_hash_us(a, seed, 20_000 if kind == "memory" else 2_000, readers[0])
    if isinstance(a, SummaryKeyStore):
        overhead = _summary_bytes(a) / max(1, len(a))
    else:
        overhead = a.overhead_bytes() / max(1, len(a))
    row: dict[str, object] = {} if kind == "memory" else {"store": kind}
    return row | {
        "n": n,
        "d": d,
        "round_trips": result.round_trips,
        "messages": result.messages,
        "bytes_total": result.bytes_total,
        "largest_message": result.largest_message,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        "range_hash_us": round(rh_wall, 2),
        "range_hash_cpu_us": round(rh_cpu, 2),
        "build_seconds_per_store": round(build_seconds, 2),
        "store_overhead_bytes_per_key": round(overhead, 1),
        "naive_bytes": 2 * n * KEY_BYTES,
        "lower_bound_bytes": 2 * d * KEY_BYTES,
        "fanout": config.fanout,
        "key_list_threshold": config.key_list_threshold,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


COLUMNS = (
    "n",
    "d",
    "round_trips",
    "bytes_total",
    "naive_bytes",
    "lower_bound_bytes",
    "seconds",
    "cpu_seconds",
    "range_hash_us",
    "store_overhead_bytes_per_key",
    "peak_rss_mb",
    "load_avg_1m",
)


def _table(rows: list[dict[str, object]]) -> str:
    lines = [" ".join(f"{c:>14}" for c in COLUMNS)]
    lines += [" ".join(f"{row[c]!s:>14}" for c in COLUMNS) for row in rows]
    return "\n".join(lines)


def _save(rows: list[dict[str, object]]) -> None:
    existing: list[dict[str, object]] = []
    if OUT.exists():
        existing = json.loads(OUT.read_text())["results"]
    merged = {(r.get("store", "memory"), r["n"], r["d"]): r for r in existing}
    merged.update({(r.get("store", "memory"), r["n"], r["d"]): r for r in rows})
    ordered = sorted(merged.values(), key=lambda r: (str(r.get("store", "memory")),
                                                      int(str(r["n"])), int(str(r["d"]))))
    note = (
        "pure Python on a 2-core machine shared with other jobs; wall-clock timings are noisy "
        "(see load_avg_1m; cpu_seconds and range_hash_cpu_us are CPU time of this process). "
        "round_trips = ceil(messages / 2). bytes_total counts both directions."
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"note": note, "results": ordered}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--grid", action="store_true", help="run every N x D of the issue")
    parser.add_argument("--seed", type=int, default=124)
    parser.add_argument("--fanout", type=int, default=16)
    parser.add_argument("--threshold", type=int, default=8)
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--store", choices=("memory", "summary"), default="memory")
    parser.add_argument("--smoke", action="store_true",
                        help="N=2,000, D=10, JSON to a temp file (the make test smoke run)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.n, args.d, args.grid = 2_000, 10, False
    config = ReconConfig(fanout=args.fanout, key_list_threshold=args.threshold)
    plan = [(n, d) for n in GRID_N for d in GRID_D] if args.grid else [(args.n, args.d)]
    rows = []
    for n, d in plan:
        if args.grid:
            # one process per configuration, so that peak_rss_mb is that configuration's own
            argv_one = [sys.executable, __file__, "--n", str(n), "--d", str(d), "--no-save"]
            argv_one += ["--seed", str(args.seed), "--fanout", str(args.fanout)]
            argv_one += ["--threshold", str(args.threshold), "--store", args.store]
            out = subprocess.run(argv_one, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
        else:
            rows.append(run(n, d, args.seed, config, args.store))
        print(_table(rows[-1:]), file=sys.stderr, flush=True)
    print(_table(rows))
    if not (args.no_save or args.smoke):
        _save(rows)
    return finish(rows[-1], JSON_KEYS, smoke_path("recon") if args.smoke else None)


if __name__ == "__main__":
    sys.exit(main())
