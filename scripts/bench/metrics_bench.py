"""Metrics hot path: the cost of one counter ``inc``, gauge ``set`` and histogram ``observe``.

The per-event paths (ingest, publish, Recon, the API guard) call
``node.telemetry.metrics.Metrics`` many times per event, so these calls must stay cheap. Each
figure is the least CPU time over ``--repeat`` timings of ``--calls`` calls, in nanoseconds per
call (the machine's load shows in ``loadavg_1m``). ``render_ms``: the median wall time of one
scrape of a registry holding ``--series`` labelled series. Prints a table; the last line is a
JSON object; a full run also writes docs/bench/metrics.json.

    python scripts/bench/metrics_bench.py [--quick] [--no-save] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchjson import finish, smoke_path  # noqa: E402

from node.telemetry.metrics import Metrics  # noqa: E402  (after the path set-up above)

#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("calls", "inc_ns", "inc_labelled_ns", "set_labelled_ns", "observe_ns",
             "observe_labelled_ns", "render_ms", "series", "loadavg_1m")


def per_call_ns(body: Callable[[int], None], calls: int, repeat: int) -> float:
    """The least CPU time of ``body(calls)`` over ``repeat`` runs, per call, in ns: the cores
    are shared, and the minimum is the run the other processes disturbed least (as timeit)."""
    body(min(calls, 1000))  # warm: the first call of a series creates it
    runs = []
    for _ in range(repeat):
        started = time.process_time_ns()
        body(calls)
        runs.append((time.process_time_ns() - started) / calls)
    return round(min(runs), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--series", type=int, default=2_000)
    parser.add_argument("--quick", action="store_true", help="fewer calls, no save")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny size, JSON to a temp file")
    args = parser.parse_args()
    calls = 2_000 if args.smoke else 50_000 if args.quick else args.calls
    repeat = 3 if args.smoke else args.repeat
    series = 50 if args.smoke else args.series

    metrics = Metrics()
    metrics.describe("bench_total", "counter", "unlabelled counter")
    metrics.describe("bench_labelled_total", "counter", "labelled counter")
    metrics.describe("bench_gauge", "gauge", "labelled gauge")
    metrics.describe_histogram("bench_seconds", "histogram")
    metrics.describe_histogram("bench_labelled_seconds", "labelled histogram")

    def inc(n: int) -> None:
        for _ in range(n):
            metrics.inc("bench_total")

    def inc_labelled(n: int) -> None:
        for _ in range(n):
            metrics.inc("bench_labelled_total", channel="general", reason="duplicate")

    def set_labelled(n: int) -> None:
        for i in range(n):
            metrics.set("bench_gauge", i, peer="6Xs9RunsjqVK")

    def observe(n: int) -> None:
        for i in range(n):
            metrics.observe("bench_seconds", (i % 100) * 0.0007)

    def observe_labelled(n: int) -> None:
        for i in range(n):
            metrics.observe("bench_labelled_seconds", (i % 100) * 0.0007, outcome="ok")

    figures = {name: per_call_ns(body, calls, repeat) for name, body in (
        ("inc_ns", inc), ("inc_labelled_ns", inc_labelled), ("set_labelled_ns", set_labelled),
        ("observe_ns", observe), ("observe_labelled_ns", observe_labelled))}
    for i in range(series):
        metrics.inc("bench_labelled_total", channel=f"c{i}", reason="duplicate")
    renders = []
    for _ in range(repeat):
        started = time.perf_counter()
        metrics.render()
        renders.append(time.perf_counter() - started)
    render_ms = round(statistics.median(renders) * 1000, 2)

    print(f"{'call':<22} {'ns per call':>12}  ({calls:,} calls, least CPU time of {repeat})")
    for name, value in figures.items():
        print(f"{name.removesuffix('_ns'):<22} {value:>12.1f}")
    print(f"render ({series:,} series) {render_ms:>9.2f} ms")
    summary = {"benchmark": "metrics", "calls": calls, **figures, "render_ms": render_ms,
               "series": series, "python": platform.python_version(), "cpus": os.cpu_count(),
               "loadavg_1m": round(os.getloadavg()[0], 2)}
    out = (smoke_path("metrics") if args.smoke else
           None if args.quick or args.no_save else ROOT / "docs" / "bench" / "metrics.json")
    return finish(summary, JSON_KEYS, out)


if __name__ == "__main__":
    raise SystemExit(main())
