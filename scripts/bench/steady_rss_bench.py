#!/usr/bin/env python3
"""Memory of nodes under steady load, on the default settings: ``--nodes`` node processes
joined on loopback, a steady publish load (``--rate`` events/s in batches of ``--batch``, on
the nodes in turn) for ``--seconds``, each node's resident memory (VmRSS) sampled every
``--sample`` seconds.

What it judges: after the warm-up, a node's memory grows only while its bounded in-memory
structures fill (docs/ops/README.md "Memory": the delivered-id window, the Recon key cache, the
SDS repair cache), by about the bytes per event given there, and not at all once they are full
(run it with a config that makes them small, ``--config``, to see the plateau in minutes).
``--burst N --burst-every S`` adds a burst of N events on one node every S seconds (as the
chaos run's bursts); ``--memtrace DIR`` turns on the nodes' memory debug hook
(node/telemetry/memtrace.py; ``scripts/bench/memtrace_diff.py DIR/n0`` reads it).

Keys: ``steady_rss_slope_mib_per_h`` (the steepest node's least-squares slope after the
warm-up), ``steady_rss_late_slope_mib_per_h`` (the same over the run's second half: at the
default rate, once the windows are full), ``steady_rss_bytes_per_event`` (the most a node
grew after the warm-up, per event published meanwhile), ``steady_rss_start_mib`` /
``steady_rss_end_mib`` / ``steady_rss_peak_mib`` (the most of any node: at the end of the
warm-up, at the end, at most), ``steady_rss_events``, ``steady_rss_seconds``,
``steady_rss_rate`` (events/s achieved), ``steady_rss_load`` (1-minute load average at the
end), ``steady_rss_store_lookups`` / ``steady_rss_keystore_reads`` (all nodes: SDS questions
to the database about ids older than the delivered window, Recon bucket reads from the
database: what smaller windows cost), ``steady_rss_curves`` (per node: [seconds, MiB]
samples). The last line is the JSON, also written to docs/bench/steady_rss.json (``--smoke``:
2 nodes, 6 s, a temporary file).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from benchjson import finish, smoke_path  # noqa: E402
from rss_slope import slope_mib_per_h  # noqa: E402

from tests.harness.cluster import join_all, metric, wait_for  # noqa: E402
from tests.harness.procs import NodeProcess, start_all  # noqa: E402

JSON_KEYS = (
    "steady_rss_slope_mib_per_h",
    "steady_rss_late_slope_mib_per_h",
    "steady_rss_bytes_per_event",
    "steady_rss_start_mib",
    "steady_rss_end_mib",
    "steady_rss_peak_mib",
    "steady_rss_events",
    "steady_rss_seconds",
    "steady_rss_rate",
    "steady_rss_load",
    "steady_rss_store_lookups",
    "steady_rss_keystore_reads",
    "steady_rss_curves",
)
CHANNEL = "general"
MIB = 1 << 20


def rss_mib(pid: int) -> float:
    """A process's resident memory (MiB), from /proc."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


class Load:
    """Publishes ``rate`` events/s in batches of ``batch`` on the nodes in turn, in a thread;
    every ``burst_every_s`` seconds (0: never) one node also publishes ``burst`` events at
    once, in batches of 500 (as the chaos run's bursts do)."""

    def __init__(self, nodes: list[NodeProcess], rate: float, batch: int,
                 burst: int = 0, burst_every_s: float = 0.0) -> None:
        self.nodes, self.period, self.batch = nodes, batch / rate, batch
        self.burst, self.burst_every_s = burst, burst_every_s
        self.published = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        clients = [node.client(timeout=60) for node in self.nodes]
        due, turn = time.monotonic(), 0
        burst_due = due + self.burst_every_s
        while not self.stop.is_set():
            if self.burst and self.burst_every_s and time.monotonic() >= burst_due:
                self._burst(clients[turn % len(clients)])
                burst_due += self.burst_every_s
            events = [{"content": f"steady {self.published + i} " + "x" * 40}
                      for i in range(self.batch)]
            response = clients[turn % len(clients)].post(f"/v1/channels/{CHANNEL}/events",
                                                         json={"events": events})
            response.raise_for_status()
            self.published += self.batch
            turn += 1
            due += self.period
            time.sleep(max(0.0, due - time.monotonic()))
        for client in clients:
            client.close()

    def _burst(self, client: Any) -> None:
        for start in range(0, self.burst, 500):
            events = [{"content": f"burst {self.published + i} " + "x" * 40}
                      for i in range(min(500, self.burst - start))]
            client.post(f"/v1/channels/{CHANNEL}/events", json={"events": events}
                        ).raise_for_status()
            self.published += len(events)


def _slope(samples: list[tuple[float, float, int]]) -> float | None:
    return slope_mib_per_h([(t, mib) for t, mib, _ in samples])


def judge(curves: list[list[tuple[float, float, int]]], warmup_s: float) -> dict[str, Any]:
    """The figures of the samples (seconds, MiB, events published by then) of each node."""
    slopes, late, per_event, starts, ends = [], [], [], [], []
    for samples in curves:
        kept = [s for s in samples if s[0] >= warmup_s] or samples[-1:]
        (_, first, events0), (_, last, events1) = kept[0], kept[-1]
        slopes.append(_slope(kept))
        late.append(_slope([s for s in samples if s[0] >= samples[-1][0] / 2]))
        per_event.append((last - first) * MIB / max(1, events1 - events0))
        starts.append(first)
        ends.append(last)
    def steepest(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(max(known), 1) if known else None

    return {
        "steady_rss_slope_mib_per_h": steepest(slopes),
        "steady_rss_late_slope_mib_per_h": steepest(late),
        "steady_rss_bytes_per_event": round(max(per_event)),
        "steady_rss_start_mib": round(max(starts), 1),
        "steady_rss_end_mib": round(max(ends), 1),
        "steady_rss_peak_mib": round(max(s[1] for c in curves for s in c), 1),
    }


def run(nodes: int, rate: float, batch: int, seconds: float, sample_s: float, warmup_s: float,
        config_toml: str = "", burst: tuple[int, float] = (0, 0.0),
        memtrace: Path | None = None) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="syncnode-steady-rss-"))
    config = None
    if config_toml:
        config = base / "node.toml"
        config.write_text(config_toml)
    group: list[NodeProcess] = []
    try:
        # Started side by side: their interpreters' start-ups overlap (start_all stops them
        # all if one fails).
        group += start_all([NodeProcess(base / f"n{i}", config=config, env=_memtrace_env(
            memtrace, i)) for i in range(nodes)], timeout=180)
        join_all(group)
        wait_for(lambda: all(len(n.get("/v1/peers")["connected"]) >= nodes - 1 for n in group),
                 60, "the nodes did not connect")
        load = Load(group, rate, batch, *burst)
        pids = [node.proc.pid for node in group if node.proc is not None]
        curves: list[list[tuple[float, float, int]]] = [[] for _ in pids]
        started = time.monotonic()
        load.thread.start()
        try:
            while (elapsed := time.monotonic() - started) < seconds and load.thread.is_alive():
                for curve, pid in zip(curves, pids, strict=True):
                    curve.append((elapsed, rss_mib(pid), load.published))
                time.sleep(sample_s)
        finally:
            load.stop.set()
            load.thread.join(timeout=60)
        if not curves[0] or elapsed < seconds:
            raise RuntimeError("the load stopped before the end (a publish failed)")
        result = judge(curves, warmup_s)
        result.update({
            "steady_rss_events": load.published,
            "steady_rss_seconds": round(elapsed),
            "steady_rss_rate": round(load.published / elapsed, 1),
            "steady_rss_load": round(os.getloadavg()[0], 2),
            # What smaller in-memory windows cost: reads of the database instead.
            "steady_rss_store_lookups": sum(metric(n, "sds_store_lookups_total") for n in group),
            "steady_rss_keystore_reads": sum(metric(n, "recon_keystore_reads_total")
                                             for n in group),
            "steady_rss_curves": [[[round(t), round(v, 1)] for t, v, _ in c] for c in curves],
        })
        return result
    finally:
        for node in group:
            node.kill()
        shutil.rmtree(base, ignore_errors=True)


def _memtrace_env(directory: Path | None, node: int) -> dict[str, str] | None:
    """Node ``node``'s environment for the memory debug hook (node/telemetry/memtrace.py):
    samples every 30 s into ``directory``/n<node>, with tracemalloc keeping 8 frames unless
    ``SYNCNODE_MEMTRACE_FRAMES`` is 0 (tracemalloc doubles the memory and slows the node)."""
    if directory is None:
        return None
    env = {"SYNCNODE_MEMTRACE_DIR": str(directory / f"n{node}"), "SYNCNODE_MEMTRACE_S": "30"}
    frames = os.environ.get("SYNCNODE_MEMTRACE_FRAMES", "8")
    return env | ({"PYTHONTRACEMALLOC": frames} if frames != "0" else {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2 nodes, 6 s")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--rate", type=float, default=60.0, help="events per second")
    parser.add_argument("--batch", type=int, default=8, help="events per publish")
    parser.add_argument("--seconds", type=float, default=420.0)
    parser.add_argument("--sample", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=120.0)
    parser.add_argument("--config", type=Path, help="a node config file (experiments)")
    parser.add_argument("--burst", type=int, default=0, help="events per burst (0: none)")
    parser.add_argument("--burst-every", type=float, default=60.0, help="seconds between bursts")
    parser.add_argument("--memtrace", type=Path,
                        help="a directory for the nodes' gc/tracemalloc samples (slow: debug)")
    parser.add_argument("--out", type=Path, help="the JSON file (default docs/bench/)")
    args = parser.parse_args()
    if args.smoke:
        # Four samples a second: the run's second half (3 s) holds the 3 points a slope needs
        # even when a loaded machine stretches each sample to a second.
        result = run(2, 20.0, 4, 6.0, 0.25, 2.5)
        out = smoke_path("steady_rss")
    else:
        toml = args.config.read_text() if args.config else ""
        result = run(args.nodes, args.rate, args.batch, args.seconds, args.sample, args.warmup,
                     toml, (args.burst, args.burst_every), args.memtrace)
        out = args.out or ROOT / "docs" / "bench" / "steady_rss.json"
    print(f"{'figure':<28} value")
    for key in JSON_KEYS[:-1]:
        print(f"{key:<28} {result[key]}")
    for i, curve in enumerate(result["steady_rss_curves"]):
        step = max(1, len(curve) // 8)
        print(f"node {i}: " + "  ".join(f"{t}s {v}" for t, v in curve[::step]))
    return finish(result, JSON_KEYS, out)


if __name__ == "__main__":
    sys.exit(main())
