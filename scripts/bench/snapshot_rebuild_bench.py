"""``syncnode snapshot rebuild --wait`` as an operator sees it: wall time of the whole command.

Starts one real node (loopback, free ports, a temporary data dir) of the code in ``--root``
(default this checkout; give an old checkout to measure "before"), publishes ``--events``
events, then times, each as a fresh ``syncnode`` process with ``--api`` and ``--data-dir``:

* ``small_s``: a rebuild that writes the events (``spark.period_ms`` 1 s, ``settle_ms`` 0, so
  they are settled once their second ended): Spark runs;
* ``no_change_s``: the same rebuild again, nothing new since: answered without Spark (issue 29;
  it took ~30 s before);
* ``nothing_settled_s``: on a second node with the default settle window, a rebuild right after
  publishing (every event still in the window, nothing to write).

``--smoke`` (what ``make test`` runs) measures only ``nothing_settled_s`` and ``no_change_s`` of
that second node (no Spark: seconds) and writes its JSON to a temporary file. Prints a table;
the last line is the JSON (keys: ``root``, ``events``, ``small_s``, ``no_change_s``,
``nothing_settled_s``, ``load_1m``, ``smoke``); a full run writes docs/bench/snapshot_rebuild.json.

    flock /tmp/syncnode-bench.lock python scripts/bench/snapshot_rebuild_bench.py [--smoke]
        [--root DIR] [--events N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("small_s", "no_change_s", "nothing_settled_s")
SPARK_ENV = {"SYNCNODE_SPARK_MASTER": "local[1]", "SYNCNODE_SPARK_PARTITIONS": "1",
             "SYNCNODE_SPARK_DRIVER_MEMORY": "512m",
             "SYNCNODE_STORAGE_SQLITE_SYNCHRONOUS": "NORMAL"}


class Node:
    """``syncnode run`` of the code in ``root``, on free loopback ports."""

    def __init__(self, root: Path, data_dir: Path, env: dict[str, str]) -> None:
        self.root, self.data_dir = root, data_dir
        self.env = {**os.environ, "PYTHONPATH": str(root), **SPARK_ENV, **env}
        self.env.pop("SYNCNODE_API_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "run", "--data-dir", str(data_dir), "--api",
             "127.0.0.1:0", "--listen", "/ip4/127.0.0.1/tcp/0"],
            cwd=root, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.api = ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("api:"):
                self.api = line.split()[-1]
                break
        if not self.api:
            raise SystemExit(f"node in {data_dir} did not start")
        self.token = (data_dir / "api_token").read_text().strip()

    def publish(self, count: int) -> None:
        for i in range(count):
            request = urllib.request.Request(
                f"{self.api}/v1/channels/general/events", method="POST",
                data=json.dumps({"content": f"event {i}"}).encode(),
                headers={"Authorization": f"Bearer {self.token}",
                         "Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as answer:
                answer.read()

    def time_rebuild(self) -> tuple[float, str]:
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "node.cli", "snapshot", "rebuild", "--wait", "--api",
             self.api, "--data-dir", str(self.data_dir)],
            cwd=self.root, env=self.env, capture_output=True, text=True, timeout=900)
        seconds = time.perf_counter() - started
        if result.returncode != 0:
            raise SystemExit(f"rebuild failed: {result.stdout[-500:]} {result.stderr[-500:]}")
        return seconds, result.stdout

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="no Spark: seconds")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose code runs")
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rebuild-bench-"))
    row: dict[str, Any] = {"root": str(args.root), "events": args.events, "small_s": None,
                           "no_change_s": None, "nothing_settled_s": None,
                           "smoke": args.smoke}
    try:
        if not args.smoke:
            node = Node(args.root, tmp / "settled", {"SYNCNODE_SPARK_PERIOD_MS": "1000",
                                                      "SYNCNODE_SPARK_SETTLE_MS": "0"})
            try:
                node.publish(args.events)
                time.sleep(1.2)  # the events' one-second periods end
                row["small_s"], shown = node.time_rebuild()
                if f"written: {args.events} events" not in shown:
                    raise SystemExit(f"the build did not write the events: {shown[-800:]}")
                row["no_change_s"], _ = node.time_rebuild()
            finally:
                node.stop()
        fresh = Node(args.root, tmp / "fresh", {})
        try:
            fresh.publish(args.events)
            row["nothing_settled_s"], shown = fresh.time_rebuild()
            if "left out:" not in shown:
                raise SystemExit(f"expected events left out: {shown[-800:]}")
            if args.smoke:
                row["no_change_s"], _ = fresh.time_rebuild()
        finally:
            fresh.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    row["load_1m"] = round(os.getloadavg()[0], 2)
    for key in ("small_s", "no_change_s", "nothing_settled_s"):
        if row[key] is not None:
            row[key] = round(row[key], 2)
    print(f"{'case':<20}{'seconds':>10}")
    for key in ("small_s", "no_change_s", "nothing_settled_s"):
        print(f"{key:<20}{'-' if row[key] is None else row[key]:>10}")
    print(f"(load {row['load_1m']}, {args.events} events, code of {args.root})")
    out = args.out or (Path(tempfile.gettempdir()) / "snapshot_rebuild_smoke.json" if args.smoke
                       else ROOT / "docs" / "bench" / "snapshot_rebuild.json")
    out.write_text(json.dumps(row, indent=2) + "\n")
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
