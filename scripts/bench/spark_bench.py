"""Spark jobs benchmark: rehash (local[2], JDBC read included) vs one plain Python process.

    .venv/bin/python scripts/bench/spark_bench.py [--quick] [--partitions N] [--skip-5x]

Builds (once, cached under --cache-dir, default ``.cache/bench`` in the repository, gitignored)
a SQLite log of 1,000,000 real signed events (100,000 with --quick; 10,000,000 for the scale
run: ~40 min to generate on 2 busy cores), then measures:

- ``python_baseline_events_per_s``: the same per-event re-hash (``RowChecker``) in one Python
  process reading SQLite directly: the practical limit of one core here;
- ``rehash_events_per_s``: ``spark_jobs.rehash.run`` on local[2], from the JDBC read to the
  report (the session is started and warmed up on a 2,000-event log before the clock starts);
- ``snapshot_events_per_s``: the snapshot job (``python -m spark_jobs.snapshot``, local[2],
  60 s periods, every period written, a 1 GiB driver) on the log, timed from its start to its
  manifest (``run_seconds``: without starting the session); ``snapshot_driver_peak_rss_mib``:
  the peak resident memory of its driver (the Python process + its JVM; in local mode the
  executor threads share that JVM, the Python workers are not counted), sampled every 0.2 s;
- ``snapshot_plain_events_per_s``: the same snapshot written by one plain Python process
  (``spark_jobs.plain_snapshot``, reading SQLite directly; the same bytes, checked through the
  manifests) and ``snapshot_ratio`` = job / plain;
- ``snapshot_events_10m_s``: seconds of the job on --scale-events (10,000,000) events, on
  local[2] and (``context.scale``) on a standalone master with two 1-core workers on 127.0.0.1;
  ``bootstrap_events_per_s``: ``node.snapshots.bootstrap`` of a fresh SQLite node from the snapshot
  (verification of every file and signature included);
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

from benchjson import finish, smoke_path  # noqa: E402
from cryptography.hazmat.primitives.serialization import (  # noqa: E402
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from sqlalchemy import select  # noqa: E402

from spark_jobs import rehash  # noqa: E402
from spark_jobs.plain_snapshot import run_plain  # noqa: E402
from spark_jobs.source import RESULT_PREFIX, build_session  # noqa: E402
from spark_jobs.testlog import LogSpec, cached_log_path, test_key  # noqa: E402
from storage import events, make_engine  # noqa: E402

NETWORK_ID = 1
KEYS = ("events", "rehash_events_per_s", "python_baseline_events_per_s", "rehash_ratio",
        "snapshot_events_per_s", "rehash_seconds", "rehash_seconds_5x", "snapshot_ratio",
        "snapshot_plain_events_per_s", "snapshot_driver_peak_rss_mib", "snapshot_events_10m_s",
        "bootstrap_events_per_s")
#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = KEYS
#: Not measured by --quick and --smoke runs (no 5x log, no scale run): present, null.
QUICK_NULL_KEYS = ("rehash_seconds_5x", "snapshot_events_10m_s")
REHASH_KEYS = ("rehash_events_per_s", "python_baseline_events_per_s", "rehash_ratio",
               "rehash_seconds", "rehash_seconds_5x")



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


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and its descendants, Spark's Python workers excluded (they
    are executors: in local mode children of the driver's JVM)."""
    import psutil

    total = 0
    try:
        stack = [psutil.Process(root)]
        while stack:
            proc = stack.pop()
            if any("pyspark.daemon" in a or "pyspark.worker" in a for a in proc.cmdline()):
                continue
            total += proc.memory_info().rss
            stack.extend(proc.children())
    except psutil.Error:
        pass
    return total


def snapshot_job(url: str, out: Path, key_file: Path, master: str, partitions: int,
                 driver_memory: str) -> tuple[dict[str, Any], float]:
    """(the job's result line, peak driver RSS in MiB) of ``python -m spark_jobs.snapshot``."""
    import subprocess

    cmd = [sys.executable, "-m", "spark_jobs.snapshot", "--db", url, "--out", str(out),
           "--network-id", str(NETWORK_ID), "--key", str(key_file), "--master", master,
           "--partitions", str(partitions), "--driver-memory", driver_memory, "--all"]
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.2)
        stdout = proc.stdout.read() if proc.stdout else ""
        if proc.returncode != 0:
            log.seek(0)
            raise SystemExit(f"snapshot job failed ({proc.returncode}): {log.read()[-3000:]}")
    line = next(x for x in stdout.splitlines() if x.startswith(RESULT_PREFIX))
    return json.loads(line[len(RESULT_PREFIX):]), peak / 2**20


def timed_bootstrap(snap: Path, tmp: Path) -> tuple[int, float]:
    from node.snapshots.bootstrap import LoadRules, bootstrap
    from storage import upgrade
    from sync.identity import peer_id_of

    url = f"sqlite:///{tmp / 'fresh.db'}"
    engine = make_engine(url)
    upgrade(engine)
    started = time.perf_counter()
    rules = LoadRules.open([peer_id_of(test_key("bench-node", 0))], LogSpec(1).channels,
                           time.time())
    result = bootstrap(engine, snap, NETWORK_ID, rules=rules)
    seconds = time.perf_counter() - started
    engine.dispose()
    (tmp / "fresh.db").unlink()
    return result.events, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="100,000 events, no 5x run, no scale run")
    parser.add_argument("--events", type=int, help="log size (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=4, help="JDBC read partitions")
    parser.add_argument("--skip-5x", action="store_true", help="no rehash on five times the events")
    parser.add_argument("--driver-memory", default="1g",
                        help="spark.driver.memory of the snapshot job and the rehash session")
    parser.add_argument("--linear-base", type=int,
                        help="measure the linear-cost pair on this many events and five times "
                             "as many (default: the log itself and 5x its size)")
    parser.add_argument("--scale-events", type=int, default=10_000_000,
                        help="the snapshot scale run (0: none; --quick: none)")
    parser.add_argument("--scale-masters", default="local,standalone",
                        help="masters of the scale run: local (local[2]) and/or standalone")
    parser.add_argument("--no-scale-bootstrap", action="store_true",
                        help="do not bootstrap a node from the scale run's snapshot")
    parser.add_argument("--keep-scale-snapshot", metavar="DIR",
                        help="move the first master's scale snapshot to DIR instead of "
                             "bootstrapping from it here (scripts/bench/snapshot_catchup.py "
                             "does, niced, beside other work)")
    parser.add_argument("--no-bootstrap", action="store_true",
                        help="no bootstrap from the main run's snapshot (bootstrap_events_per_s "
                             "then comes from snapshot_catchup.py)")
    parser.add_argument("--no-rehash", action="store_true", help="measure the snapshot only")
    parser.add_argument("--snapshot-runs", type=int, default=1,
                        help="plain writer + job pairs, alternating (the median ratio counts)")
    parser.add_argument("--scale-only", action="store_true",
                        help="only the scale run (--scale-masters), merged into --out")
    parser.add_argument("--cache-dir", default=os.environ.get(
        "SYNCNODE_BENCH_CACHE", str(ROOT / ".cache" / "bench")))
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench" / "spark.json"))
    parser.add_argument("--smoke", action="store_true",
                        help="--quick on 2,000 events, JSON to a temp file (make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick, args.events, args.out = True, args.events or 2_000, str(smoke_path("spark"))
    n_events = args.events or (100_000 if args.quick else 1_000_000)
    cache = Path(args.cache_dir)
    rows: list[tuple[str, str]] = [("load average at start", load())]
    result: dict[str, Any] = dict.fromkeys(KEYS)
    context: dict[str, Any] = {"partitions": args.partitions, "quick": args.quick,
                               "cores": os.cpu_count(), "driver_memory": args.driver_memory}
    previous = (json.loads(Path(args.out).read_text())
                if Path(args.out).exists() and Path(args.out).stat().st_size else {})
    if args.scale_only:
        with tempfile.TemporaryDirectory(dir=cache) as tmp_name:
            tmp = Path(tmp_name)
            key_file = tmp / "node.key"
            key_file.write_bytes(test_key("bench-node", 0).private_bytes(
                Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
            result.update({k: previous.get(k) for k in KEYS})
            context = previous.get("context", context)
            scale_part(args, cache, tmp, key_file, rows, result, context)
        report(args, rows, result, context, final=True)
        return finish({k: result[k] for k in KEYS}, JSON_KEYS, None)

    t0 = time.perf_counter()
    log = cached_log_path(LogSpec(events=n_events, network_id=NETWORK_ID), cache)
    rows.append((f"log of {n_events} events (cached: {log.name})",
                 f"{time.perf_counter() - t0:.1f} s"))
    url = f"sqlite:///{log}"
    result["events"] = n_events
    # Keys a part skipped here keep the figures of the run that measured them (named).
    no_scale = args.quick or not args.scale_events
    skipped = [*(REHASH_KEYS if args.no_rehash else ()),
               *(("bootstrap_events_per_s",) if args.no_bootstrap else ()),
               *(("snapshot_events_10m_s",) if no_scale and not args.quick else ())]
    if no_scale and not args.quick and "scale" in previous.get("context", {}):
        context["scale"] = previous["context"]["scale"]
    result.update({k: previous.get(k) for k in skipped})
    context["carried_over"] = [k for k in skipped if previous.get(k) is not None]
    if not args.no_rehash:
        rehash_part(args, url, n_events, cache, rows, result, context)

    with tempfile.TemporaryDirectory(dir=cache) as tmp_name:
        tmp = Path(tmp_name)
        key_file = tmp / "node.key"
        key_file.write_bytes(test_key("bench-node", 0).private_bytes(
            Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
        pairs = []
        for _ in range(args.snapshot_runs):
            shutil.rmtree(tmp / "job", ignore_errors=True)
            pairs.append(snapshot_pair(args, url, tmp, key_file, rows))
        # The pair with the median ratio gives the figures; context.snapshot.runs has them all.
        plain, plain_s, job, rss = sorted(pairs, key=lambda p: p[1] / p[2]["run_seconds"])[
            len(pairs) // 2]
        if not args.no_bootstrap:
            b_n, b_s = timed_bootstrap(tmp / "job", tmp)
            rows.append(("bootstrap of a fresh node from it", f"{b_n / b_s:,.0f} events/s "
                         f"({b_s:.1f} s)"))
            result["bootstrap_events_per_s"] = round(b_n / b_s)
        shutil.rmtree(tmp / "job")
        result.update(
            snapshot_events_per_s=round(job["events"] / job["run_seconds"]),
            snapshot_plain_events_per_s=round(plain["events"] / plain_s),
            snapshot_ratio=round(plain_s / job["run_seconds"], 3),
            snapshot_driver_peak_rss_mib=round(rss))
        context["snapshot"] = {"events": n_events, "run_seconds": job["run_seconds"],
                               "phases": job.get("phases"),
                               "seconds_with_session": job["seconds"],
                               "plain_seconds": round(plain_s, 2), "driver_peak_rss_mib": rss,
                               "runs": [{"plain_seconds": round(p[1], 2),
                                         "job_run_seconds": p[2]["run_seconds"],
                                         "ratio": round(p[1] / p[2]["run_seconds"], 3),
                                         "phases": p[2].get("phases"),
                                         "driver_peak_rss_mib": round(p[3])} for p in pairs]}
        if args.scale_events and not args.quick:
            # The scale run takes long: what is measured so far is written first.
            report(args, rows, result, context, final=False)
            scale_part(args, cache, tmp, key_file, rows, result, context)
    report(args, rows, result, context, final=True)
    return finish({k: result[k] for k in KEYS}, JSON_KEYS, None,
                  optional=QUICK_NULL_KEYS if args.quick else ())


def snapshot_pair(args: argparse.Namespace, url: str, tmp: Path, key_file: Path,
                  rows: list[tuple[str, str]]) -> tuple[dict[str, Any], float, dict[str, Any],
                                                        float]:
    """The plain writer, then the job (local[2]) on the same log: (plain summary, plain
    seconds, job summary, driver peak RSS MiB); the job's snapshot stays in ``tmp / "job"``."""
    t0 = time.perf_counter()
    plain = run_plain(url, tmp / "plain", test_key("bench-node", 0), NETWORK_ID,
                      include_open=True)
    plain_s = time.perf_counter() - t0
    rows.append((f"snapshot, one plain process ({plain['files']} files)",
                 f"{plain['events'] / plain_s:,.0f} events/s ({plain_s:.1f} s); load {load()}"))
    job, rss = snapshot_job(url, tmp / "job", key_file, "local[2]", args.partitions,
                            args.driver_memory)
    same = (tmp / "job" / "manifest.json").read_bytes() == (
        tmp / "plain" / "manifest.json").read_bytes()
    if not same:
        raise SystemExit("the job and the plain writer wrote different snapshots")
    shutil.rmtree(tmp / "plain")
    rows.append((f"snapshot job local[2], driver {args.driver_memory} (same bytes)",
                 f"{job['events'] / job['run_seconds']:,.0f} events/s "
                 f"({job['run_seconds']:.1f} s; {job['seconds']:.1f} s with the session); "
                 f"driver peak RSS {rss:,.0f} MiB; ratio {plain_s / job['run_seconds']:.3f}; "
                 f"load {load()}"))
    rows.append(("  phases (s)", json.dumps(job.get("phases"))))
    return plain, plain_s, job, rss


def report(args: argparse.Namespace, rows: list[tuple[str, str]], result: dict[str, Any],
           context: dict[str, Any], *, final: bool) -> None:
    context["load_average"] = [r[1] for r in rows if r[0].startswith("load")] + [load()]
    context["complete"] = final
    width = max(len(k) for k, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print(f"{'load average now':<{width}}  {load()}", flush=True)
    Path(args.out).write_text(json.dumps({**result, "context": context}, indent=2) + "\n")
    if not final:  # the final line is main's (benchjson.finish)
        print(json.dumps({k: result[k] for k in KEYS}), flush=True)


def scale_part(args: argparse.Namespace, cache: Path, tmp: Path, key_file: Path,
               rows: list[tuple[str, str]], result: dict[str, Any],
               context: dict[str, Any]) -> None:
    """The snapshot of --scale-events events on each master, with the same driver memory."""
    from spark_jobs.standalone import standalone_cluster

    n = args.scale_events
    log = cached_log_path(LogSpec(events=n, network_id=NETWORK_ID), cache)
    url = f"sqlite:///{log}"
    context.setdefault("scale", {})["events"] = n
    kept = False
    for master in args.scale_masters.split(","):
        out = tmp / f"scale-{master}"
        load_before = load()
        if master == "standalone":
            (tmp / "cluster").mkdir()
            with standalone_cluster(tmp / "cluster", workers=2, cores=1) as spark_url:
                job, rss = snapshot_job(url, out, key_file, spark_url, args.partitions,
                                        args.driver_memory)
        else:
            job, rss = snapshot_job(url, out, key_file, "local[2]", args.partitions,
                                    args.driver_memory)
        rows.append((f"scale: snapshot of {n} events, {master}",
                     f"{job['events'] / job['run_seconds']:,.0f} events/s "
                     f"({job['run_seconds']:.1f} s); driver peak RSS {rss:,.0f} MiB"))
        rows.append(("  phases (s)", json.dumps(job.get("phases"))))
        context["scale"][master] = {"run_seconds": job["run_seconds"], "phases": job.get("phases"),
                                    "load_average": [load_before, load()],
                                    "seconds_with_session": job["seconds"],
                                    "driver_peak_rss_mib": round(rss), "files": job["files"]}
        if master == "local":
            result["snapshot_events_10m_s"] = job["run_seconds"]
        if args.keep_scale_snapshot and not kept:
            # The first master's snapshot is kept (the masters write the same bytes).
            shutil.rmtree(args.keep_scale_snapshot, ignore_errors=True)
            shutil.move(out, args.keep_scale_snapshot)
            context["scale"]["kept_snapshot"] = args.keep_scale_snapshot
            kept = True
            continue
        if master == "local" and not args.no_scale_bootstrap:
            b_n, b_s = timed_bootstrap(out, tmp)
            rows.append((f"scale: bootstrap of {b_n} events", f"{b_n / b_s:,.0f} events/s "
                         f"({b_s:.1f} s)"))
            context["scale"]["bootstrap_events_per_s"] = round(b_n / b_s)
        shutil.rmtree(out)


def rehash_part(args: argparse.Namespace, url: str, n_events: int, cache: Path,
                rows: list[tuple[str, str]], result: dict[str, Any],
                context: dict[str, Any]) -> None:
    base_n, base_s = python_baseline(url)
    rows.append(("python baseline (1 process)",
                 f"{base_n / base_s:,.0f} events/s ({base_s:.1f} s)"))
    t0 = time.perf_counter()
    spark = build_session("local[2]", "syncnode-bench", shuffle_partitions=args.partitions,
                          extra={"spark.driver.memory": args.driver_memory})
    # Warm-up on a tiny log: starts the Python workers and imports the job's modules in them
    # (a one-time cost of a session, tens of seconds on this loaded machine, not per event).
    if not args.smoke:  # a smoke run's log is that tiny log: its one rehash is the warm-up
        tiny = cached_log_path(LogSpec(events=2_000, network_id=NETWORK_ID), cache)
        timed_rehash(spark, f"sqlite:///{tiny}", args.partitions)
    rows.append(("spark session start + warm-up (local[2])", f"{time.perf_counter() - t0:.1f} s"))
    try:
        n, seconds = timed_rehash(spark, url, args.partitions)
        rows.append(("rehash local[2] incl. JDBC read", f"{n / seconds:,.0f} events/s "
                     f"({seconds:.1f} s)"))
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
    result.update(
        rehash_events_per_s=round(n / seconds),
        python_baseline_events_per_s=round(base_n / base_s),
        rehash_ratio=round((n / seconds) / (base_n / base_s), 3),
        rehash_seconds=round(linear[1], 2),
        rehash_seconds_5x=None if seconds_5x is None else round(seconds_5x, 2))
    context["linear_pair_events"] = [linear[0], 5 * linear[0]] if seconds_5x else None


if __name__ == "__main__":
    raise SystemExit(main())
