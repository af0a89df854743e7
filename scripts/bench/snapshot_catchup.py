"""A fresh node joins from a large snapshot, then catches up the rest through Recon.

    .venv/bin/python scripts/bench/snapshot_catchup.py bootstrap --snapshot DIR --work DIR
    .venv/bin/python scripts/bench/snapshot_catchup.py catchup --work DIR [--extra 60]

The issue's end-to-end check at full size (``spark_bench.py --keep-scale-snapshot DIR`` keeps
the 10,000,000-event snapshot it built):

1. ``bootstrap``: ``syncnode bootstrap --from-snapshot`` into ``<work>/fresh`` (every file,
   signature file and event signature verified, bulk insert); timed: ``bootstrap_events_per_s``.
   It takes long (~20 min at 10M events) and needs no quiet machine: niced, it can run beside
   other work.
2. ``catchup``: a source node on a copy of the log the snapshot was built from (cached by
   ``spark_bench.py``; ``--source-in-place``: on the cached file itself, the events the run
   adds are deleted again afterwards) takes ``--extra`` new events; the bootstrapped node
   starts against it with incoming gossip dropped, so everything it lacks must come through
   Recon. Done when both nodes hold the same number of events and Recon fetched exactly the
   new ones (the fresh node stored nothing else: the rest came from the snapshot).

Each step merges its figures into ``context.scale`` of docs/bench/spark.json (the issue's keys
are kept) and prints them; the last line is the JSON of the step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spark_jobs.testlog import LogSpec, cached_log_path, test_key  # noqa: E402
from sync.identity import peer_id_of  # noqa: E402

NETWORK_ID = 1
CHANNELS = LogSpec(events=1).channels


def _merge(out: Path, key: str, figures: dict[str, Any]) -> None:
    """Put ``figures`` under ``context.scale.<key>`` of the benchmark's JSON file."""
    data = json.loads(out.read_text()) if out.exists() else {}
    data.setdefault("context", {}).setdefault("scale", {})[key] = figures
    if key == "bootstrap":
        # The key: loading a snapshot into a fresh node, here the full-size one.
        data["bootstrap_events_per_s"] = figures["bootstrap_events_per_s"]
        carried = data["context"].get("carried_over") or []
        data["context"]["carried_over"] = [k for k in carried if k != "bootstrap_events_per_s"]
    out.write_text(json.dumps(data, indent=2) + "\n")


def bootstrap_step(args: argparse.Namespace) -> dict[str, Any]:
    from node.cli import snapshot as cli_snapshot

    fresh = Path(args.work) / "fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    config = Path(args.work) / "node.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    # The node replicates the log's channels and trusts the key spark_bench.py signs with.
    channels = json.dumps(list(CHANNELS))
    config.write_text(f"[node]\nnetwork_id = {NETWORK_ID}\n[p2p]\nchannels = {channels}\n")
    manifest = json.loads((Path(args.snapshot) / "manifest.json").read_text())
    signer = peer_id_of(test_key("bench-node", 0))
    started = time.perf_counter()
    code = cli_snapshot.main(["bootstrap", "--from-snapshot", str(args.snapshot),
                              "--data-dir", str(fresh), "--config", str(config),
                              "--signer", signer])
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"bootstrap failed with exit status {code}")
    events = int(manifest["count"])
    return {"events": events, "seconds": round(seconds, 1),
            "bootstrap_events_per_s": round(events / seconds), "files": len(manifest["files"]),
            "load_average": os.getloadavg()}


def _log_end(log: Path) -> tuple[int, int]:
    """(events, largest seq) of a cached log."""
    with contextlib.closing(sqlite3.connect(log)) as db:
        count, top = db.execute("SELECT count(*), coalesce(max(seq), 0) FROM events").fetchone()
    return int(count), int(top)


def _restore(log: Path, before: tuple[int, int]) -> None:
    """Remove the events a source node running on the cached log itself added; the log's
    events are then exactly the cached ones again (else this fails loudly)."""
    with contextlib.closing(sqlite3.connect(log)) as db:
        db.execute("DELETE FROM events WHERE seq > ?", (before[1],))
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if _log_end(log) != before:
        raise SystemExit(f"{log}: could not restore the cached log to {before} events/seq")


def catchup_step(args: argparse.Namespace) -> dict[str, Any]:
    from tests.harness.cluster import FAST_ENV, metric, publish_many, wait_for
    from tests.harness.procs import NodeProcess

    work = Path(args.work)
    log = cached_log_path(LogSpec(events=args.events, network_id=NETWORK_ID), Path(args.cache_dir))
    source_dir = work / "source"
    shutil.rmtree(source_dir, ignore_errors=True)
    source_dir.mkdir(parents=True)
    env = {**FAST_ENV, "SYNCNODE_NODE_NETWORK_ID": str(NETWORK_ID),
           "SYNCNODE_P2P_CHANNELS": ",".join(CHANNELS)}
    source_env = dict(env)
    started = time.perf_counter()
    if args.source_in_place:
        before = _log_end(log)
        source_env["SYNCNODE_STORAGE_URL"] = f"sqlite:///{log}"
    else:
        shutil.copyfile(log, source_dir / "syncnode.db")
    # The copy of the log, or (in place) the count of its events that _restore checks against.
    prepare_s = time.perf_counter() - started
    source = fresh = None
    try:
        started = time.perf_counter()
        source = NodeProcess(source_dir, env=source_env).start(timeout=args.start_timeout)
        source_start_s = time.perf_counter() - started
        extra = publish_many(source, CHANNELS[0], [f"after the snapshot {k}"
                                                   for k in range(args.extra)])
        started = time.perf_counter()
        fresh = NodeProcess(work / "fresh", "--bootstrap", source.listen_addrs[0], env={
            **env, "SYNCNODE_P2P_TEST_DROP_INCOMING_GOSSIP": "1.0",
            "SYNCNODE_RECON_GOSSIP_GRACE_S": "0"}).start(timeout=args.start_timeout)
        fresh_start_s = time.perf_counter() - started
        total = int(source.status()["events"])

        def caught_up() -> bool:
            return int(fresh.status()["events"]) == total

        started = time.perf_counter()
        wait_for(caught_up, args.timeout, "the bootstrapped node did not catch up")
        catchup_s = time.perf_counter() - started
        figures = {
            "source_events": total, "fresh_events": int(fresh.status()["events"]),
            "extra_published": len(extra),
            "recon_events_fetched": metric(fresh, "recon_events_fetched_total"),
            "events_stored": metric(fresh, "events_stored_total"),
            "gossip_received": metric(fresh, "p2p_gossip_received_total"),
            "source_in_place": args.source_in_place,
            ("count_s" if args.source_in_place else "copy_s"): round(prepare_s, 1),
            "source_start_s": round(source_start_s, 1),
            "fresh_start_s": round(fresh_start_s, 1), "catchup_s": round(catchup_s, 1),
            "load_average": os.getloadavg()}
    finally:
        for node in (fresh, source):
            if node is not None:
                node.kill()
        shutil.rmtree(source_dir, ignore_errors=True)
        if args.source_in_place:
            _restore(log, before)
    if not (figures["recon_events_fetched"] == figures["events_stored"] == len(extra)
            and figures["gossip_received"] == 0):
        raise SystemExit(f"the catch-up did not fetch exactly the new events: {figures}")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("bootstrap", "catchup"))
    parser.add_argument("--work", required=True, help="the fresh node's and source's parent dir")
    parser.add_argument("--snapshot", help="the snapshot directory (bootstrap)")
    parser.add_argument("--events", type=int, default=10_000_000,
                        help="size of the cached log the snapshot was built from (catchup)")
    parser.add_argument("--extra", type=int, default=60, help="events published after it")
    parser.add_argument("--source-in-place", action="store_true",
                        help="run the source node on the cached log itself instead of a copy "
                             "(when the disk cannot hold a second 10M-event database); the "
                             "events it adds are deleted again afterwards")
    parser.add_argument("--start-timeout", type=float, default=1800.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="for the catch-up")
    parser.add_argument("--cache-dir", default=os.environ.get(
        "SYNCNODE_BENCH_CACHE", str(ROOT / ".cache" / "bench")))
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench" / "spark.json"))
    args = parser.parse_args(argv)
    if args.step == "bootstrap":
        if not args.snapshot:
            parser.error("bootstrap needs --snapshot")
        figures = bootstrap_step(args)
    else:
        figures = catchup_step(args)
    _merge(Path(args.out), args.step, figures)
    for key, value in figures.items():
        print(f"{key:<22}  {value}")
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
