"""Spark jobs benchmark: rehash (local[2], JDBC read included) vs one plain Python process.

    .venv/bin/python scripts/bench/spark_bench.py [--quick] [--partitions N] [--skip-5x]

Builds (once, cached under --cache-dir) a SQLite log of 1,000,000 real signed events (100,000
with --quick), then measures:

- ``python_baseline_events_per_s``: the same per-event re-hash (``RowChecker``) in one Python
  process reading SQLite directly: the practical limit of one core here;
- ``rehash_events_per_s``: ``spark_jobs.rehash.run`` on local[2], from the JDBC read to the
  report (the session is started and warmed up on a 2,000-event log before the clock starts);
- ``snapshot_events_per_s``: ``spark_jobs.snapshot.run`` (60 s periods, every period written);
- ``rehash_seconds`` and ``rehash_seconds_5x``: the rehash on the log and on a log five times
  larger (without --quick; generating 5,000,000 signed events the first time takes 15-30 min
  on 2 cores, then it is cached: ``--linear-base 200000`` measures the pair on 200,000 and
  1,000,000 events instead, and the JSON file's ``context.linear_pair_events`` says which pair
  was measured).

Prints a table and, as its last line, one JSON object; also writes docs/bench/spark.json. The
machine has 2 cores shared with other work: the load average is recorded next to the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sqlalchemy import select  # noqa: E402

from spark_jobs import rehash, snapshot  # noqa: E402
from spark_jobs.source import build_session  # noqa: E402
from spark_jobs.testlog import LogSpec, cached_log_path, test_key  # noqa: E402
from storage import events, make_engine  # noqa: E402

NETWORK_ID = 1
KEYS = ("events", "rehash_events_per_s", "python_baseline_events_per_s", "rehash_ratio",
        "snapshot_events_per_s", "rehash_seconds", "rehash_seconds_5x")


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def python_baseline(url: str) -> tuple[int, float]:
    """(events, seconds) of the per-event re-hash in this process, reading SQLite directly."""
    checker = rehash.RowChecker(NETWORK_ID)
    engine = make_engine(url)
    cols = [events.c[c] for c in rehash.INPUT_COLUMNS]
    started = time.perf_counter()
    n = 0
    with engine.connect() as conn:
        result = conn.execution_options(yield_per=20_000).execute(
            select(*cols).order_by(events.c.seq))
        for out in checker.partition(result):  # Rows behave as tuples: no conversion
            if out[0] == "row":
                raise SystemExit(f"baseline found a bad row: {out}")
            n += int(out[4])
    seconds = time.perf_counter() - started
    engine.dispose()
    return n, seconds


def timed_rehash(spark: Any, url: str, partitions: int) -> tuple[int, float]:
    started = time.perf_counter()
    report = rehash.run(spark, url, NETWORK_ID, partitions=partitions)
    seconds = time.perf_counter() - started
    if not report["ok"]:
        raise SystemExit(f"rehash reported problems on a clean log: {report['bad_rows']} rows")
    return int(report["events"]), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events, no 5x run")
    parser.add_argument("--events", type=int, help="log size (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=4, help="JDBC read partitions")
    parser.add_argument("--skip-5x", action="store_true", help="no run on five times the events")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory (local mode)")
    parser.add_argument("--linear-base", type=int,
                        help="measure the linear-cost pair on this many events and five times "
                             "as many (default: the log itself and 5x its size)")
    parser.add_argument("--cache-dir", default=os.environ.get(
        "SYNCNODE_BENCH_CACHE", str(Path(tempfile.gettempdir()) / "syncnode-bench-cache")))
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench" / "spark.json"))
    args = parser.parse_args(argv)
    n_events = args.events or (100_000 if args.quick else 1_000_000)
    cache = Path(args.cache_dir)
    rows: list[tuple[str, str]] = [("load average at start", load())]

    t0 = time.perf_counter()
    log = cached_log_path(LogSpec(events=n_events, network_id=NETWORK_ID), cache)
    rows.append((f"log of {n_events} events (cached: {log.name})",
                 f"{time.perf_counter() - t0:.1f} s"))
    url = f"sqlite:///{log}"

    base_n, base_s = python_baseline(url)
    rows.append(("python baseline (1 process)",
                 f"{base_n / base_s:,.0f} events/s ({base_s:.1f} s)"))

    t0 = time.perf_counter()
    # 4 GiB driver heap: with the default 1 GiB, the snapshot of 1,000,000 events (its ranked
    # events persisted while pass 2 returns ~100 MB of record files per task) failed with
    # TaskResultLost (result lost from block manager). The rehash needs no more than the default.
    spark = build_session("local[2]", "syncnode-bench", shuffle_partitions=args.partitions,
                          extra={"spark.driver.memory": args.driver_memory})
    # Warm-up on a tiny log: starts the Python workers and imports the job's modules in them
    # (a one-time cost of a session, tens of seconds on this loaded machine, not per event).
    tiny = cached_log_path(LogSpec(events=2_000, network_id=NETWORK_ID), cache)
    timed_rehash(spark, f"sqlite:///{tiny}", args.partitions)
    rows.append(("spark session start + warm-up (local[2])", f"{time.perf_counter() - t0:.1f} s"))
    try:
        n, seconds = timed_rehash(spark, url, args.partitions)
        rows.append(("rehash local[2] incl. JDBC read", f"{n / seconds:,.0f} events/s "
                     f"({seconds:.1f} s)"))
        with tempfile.TemporaryDirectory() as tmp:
            key = test_key("bench-node", 0)
            t0 = time.perf_counter()
            summary = snapshot.run(spark, url, Path(tmp) / "snap", key, NETWORK_ID,
                                   period_ms=60_000, include_open=True,
                                   partitions=args.partitions)
            snap_s = time.perf_counter() - t0
            size = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file())
            shutil.rmtree(Path(tmp) / "snap")
        rows.append((f"snapshot ({summary['files']} files, {size / 1e6:.0f} MB)",
                     f"{summary['events'] / snap_s:,.0f} events/s ({snap_s:.1f} s)"))
        seconds_5x: float | None = None
        linear: tuple[int, float] = (n, seconds)
        if not (args.quick or args.skip_5x):
            base = args.linear_base or n_events
            timings = {n_events: seconds}
            for size in (base, 5 * base):
                if size not in timings:
                    sized = cached_log_path(LogSpec(events=size, network_id=NETWORK_ID), cache)
                    timings[size] = timed_rehash(spark, f"sqlite:///{sized}", args.partitions)[1]
                    rows.append((f"rehash on {size} events", f"{size / timings[size]:,.0f} "
                                 f"events/s ({timings[size]:.1f} s)"))
            linear, seconds_5x = (base, timings[base]), timings[5 * base]
            rows.append((f"linear cost: {5 * base} vs {base} events",
                         f"x{seconds_5x / linear[1]:.2f} the time for x5 the events"))
    finally:
        spark.stop()
    rows.append(("load average at end", load()))

    result: dict[str, Any] = {
        "events": n,
        "rehash_events_per_s": round(n / seconds),
        "python_baseline_events_per_s": round(base_n / base_s),
        "rehash_ratio": round((n / seconds) / (base_n / base_s), 3),
        "snapshot_events_per_s": round(summary["events"] / snap_s),
        "rehash_seconds": round(linear[1], 2),
        "rehash_seconds_5x": None if seconds_5x is None else round(seconds_5x, 2),
    }
    width = max(len(k) for k, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    context = {"load_average": [r[1] for r in rows if r[0].startswith("load")],
               "linear_pair_events": [linear[0], 5 * linear[0]] if seconds_5x else None,
               "partitions": args.partitions, "quick": args.quick, "cores": os.cpu_count()}
    Path(args.out).write_text(json.dumps({**result, "context": context}, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in KEYS}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
