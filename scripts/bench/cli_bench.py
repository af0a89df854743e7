"""CLI latency: wall time of whole ``syncnode`` commands against a running node.

Starts one real node (loopback, free ports, a temporary data dir), then runs each command as a
fresh process the way the README shows it (``--api URL --data-dir DIR``; the token is read from
the data dir) and reports the median and p90 wall time over ``--runs`` runs. People script these
commands in loops, so the whole process counts: interpreter start, imports, the HTTP round trip.
Target: ``status_s`` and ``publish_s`` <= 0.25 s. Prints a table; the last line is a JSON object;
a full run also writes docs/bench/cli.json.

    python scripts/bench/cli_bench.py [--quick] [--runs N] [--no-save]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchjson import finish, smoke_path  # noqa: E402

from tests.harness.procs import NodeProcess  # noqa: E402  (after the path set-up above)

TARGET_S = 0.25
#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("runs", "target_s", "status_s", "publish_s", "log_s", "version_s", "help_s",
             "meets_target", "loadavg_1m")


def syncnode() -> list[str]:
    """The installed entry point when there is one (what users run), else ``-m node.cli``."""
    script = Path(sys.executable).with_name("syncnode")
    return [str(script)] if script.exists() else [sys.executable, "-m", "node.cli"]


def time_command(args: list[str], runs: int, stdin: bytes | None = None) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k != "SYNCNODE_API_TOKEN"}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = subprocess.run(args, input=stdin, capture_output=True, env=env, timeout=60)
        times.append(time.perf_counter() - started)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed: {result.stderr.decode()[-500:]}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 runs per command, no save")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="1 run per command, JSON to a temp file (the make test smoke run)")
    args = parser.parse_args()
    runs = 1 if args.smoke else 10 if args.quick else args.runs
    tmp = Path(tempfile.mkdtemp(prefix="cli-bench-"))
    node = NodeProcess(tmp / "node").start()
    try:
        base = syncnode()
        api = ["--api", node.api_url, "--data-dir", str(node.data_dir)]
        commands = {
            "version": [*base, "--version"],
            "help": [*base, "--help"],
            "status": [*base, "status", *api],
            "publish": [*base, "publish", "general", "benchmark message", *api],
            "log": [*base, "log", "general", "--limit", "10", *api],
        }
        results: dict[str, list[float]] = {}
        for name, command in commands.items():
            # Warm the page cache and the node's first-request paths.
            time_command(command, 0 if args.smoke else 2)
            results[name] = time_command(command, runs)
    finally:
        node.terminate()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{'command':<10} {'median s':>9} {'p90 s':>7} {'min s':>7}  ({runs} runs each)")
    for name, times in results.items():
        ordered = sorted(times)
        p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
        print(f"{name:<10} {statistics.median(times):>9.3f} {p90:>7.3f} {ordered[0]:>7.3f}")
    summary = {
        "benchmark": "cli",
        "runs": runs,
        "target_s": TARGET_S,
        "status_s": round(statistics.median(results["status"]), 4),
        "publish_s": round(statistics.median(results["publish"]), 4),
        "log_s": round(statistics.median(results["log"]), 4),
        "version_s": round(statistics.median(results["version"]), 4),
        "help_s": round(statistics.median(results["help"]), 4),
        "meets_target": max(statistics.median(results["status"]),
                            statistics.median(results["publish"])) <= TARGET_S,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    out = (smoke_path("cli") if args.smoke else
           None if args.quick or args.no_save else ROOT / "docs" / "bench" / "cli.json")
    return finish(summary, JSON_KEYS, out)


if __name__ == "__main__":
    raise SystemExit(main())
