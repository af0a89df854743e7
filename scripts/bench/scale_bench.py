#!/usr/bin/env python3
"""Scale benchmark: groups of N members replicating as the node does, in the deterministic
simulator.

Each run is ``sync.sim``: N members, each a real ``SdsChannel`` on the node's default settings
(signed messages), over a GossipSub-like mesh (degree 6, every duplicate copy counted),
20-200 ms per link, 20 content messages per second group-wide for ``duration`` seconds, then
settling until every member holds every message (or 900 s). Each member runs what the node
runs (docs/replication.md "Closing gaps"): SDS + SDS-R, fetch-by-id (``GapPlanner``: 1 s after
SDS reports a dependency missing, unicast to the original sender and 3 other connected peers,
sync/sim/fetch.py) and Recon + transfer between mesh neighbours every 10 s
(``ReconLifecycle``). Loss is per (message, member): a member misses a broadcast with that
probability. The 5% loss rows are also run with SDS + SDS-R alone (``stack``
``sds_r_only``: fetch-by-id and Recon off, the figures of earlier sessions) for comparison.

Per run: bytes and messages sent and received per member per published event (every copy the
mesh delivers, and every fetch request and answer, Recon frame and transfer frame, counted at
both ends; ``recv_by_kind_per_member_event`` splits what is received by kind), CPU per
(event x member) (process time inside the channels' calls; by default each broadcast is
decoded and each signature checked once for the whole group, docs/sim.md "Speed":
``--unshared`` counts every member's own decoding, as before), SDS-R repair requests and
responses and fetch-by-id requests per lost (message, member), delivery latency p50/p99
(publish to delivery at each other member), peak DAG heads. Keys (issue 30):
``bytes_growth_5pct`` (bytes received per member per event at the largest N / at N=10, 5%
loss), ``responses_per_loss_max_n`` (at the largest N, 5% loss), each also
``..._sds_r_only``; ``heads_peak`` (the peak over every run) with ``heads_peak_short`` /
``heads_peak_long`` (the same group over one and three run lengths), ``seeds_failed`` (runs
whose invariants failed: each prints its replay command).

Recon catch-up (the middle N, 5% loss, Recon + fetch-by-id on, as the node runs): 30% of the
members cut off for the middle half of the publishing, and members crashing (down 10 s) and
joining meanwhile. ``recon_catchup_s``: simulated seconds from the last heal or restart until
every honest member holds every message; ``recon_bytes_per_member_event``: Recon and transfer
bytes per member per published event; ``recon_seeds_failed`` counts into ``seeds_failed``.

``--smoke``: N = 10, 30, a few seconds, JSON to a temp file. ``--quick``: N = 10, 100, 300
(under 5 minutes on a quiet machine). Default: N = 10, 100, 1000.
The last line is the JSON result, also written to docs/bench/scale.json
(``--quick``: docs/bench/scale_quick.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("bytes_growth_5pct", "responses_per_loss_max_n", "heads_peak", "seeds_failed",
             "recon_catchup_s", "bytes_growth_5pct_sds_r_only", "delivery_p50_s_5pct_max_n",
             "delivery_p99_s_5pct_max_n")
sys.path.insert(0, str(ROOT))

from sync.sim import NetworkConfig, Scenario, SimFailure, run  # noqa: E402

CATCHUP_KEYS = ("catchup_s", "replication", "bytes_recv_per_member_event", "delivery_p50_s",
                "delivery_p99_s", "declared_lost", "sim_seconds", "wall_s")

LOSSES = (0.0, 0.05)
#: Decode and verify once for the whole group (sync/sim/shared.py; ``--unshared``: off).
SHARED = True
SIZES = {"smoke": (10, 30), "quick": (10, 100, 300), "full": (10, 100, 1000)}
DURATION = {"smoke": 3.0, "quick": 10.0, "full": 20.0}
COLUMNS = ("bytes_recv_per_member_event", "bytes_sent_per_member_event",
           "msgs_recv_per_member_event", "msgs_sent_per_member_event",
           "cpu_us_per_event_member", "requests_per_loss", "responses_per_loss",
           "fetch_requests_per_loss",
           "delivery_p50_s", "delivery_p99_s", "heads_peak")


def catchup_scenario(members: int, duration: float, seed: int) -> Scenario:
    return Scenario(members=members, seed=seed, duration=duration, recon=True, fetch=True,
                    partitions=((duration / 4, 3 * duration / 4, 0.3),),
                    crash_rate=members / 100, join_rate=members / 200, downtime=10.0,
                    network=NetworkConfig(delivery_loss=0.05))


#: What each member runs: as the node (SDS + SDS-R, fetch-by-id, Recon), or SDS + SDS-R alone.
NODE, SDS_R_ONLY = "node", "sds_r_only"


def one(members: int, loss: float, duration: float, seed: int,
        scenario: Scenario | None = None, stack: str = NODE) -> dict[str, object]:
    full = stack == NODE
    scenario = scenario or Scenario(members=members, seed=seed, duration=duration,
                                    fetch=full, recon=full,
                                    network=NetworkConfig(delivery_loss=loss))
    scenario = dataclasses.replace(scenario, shared=SHARED)
    started = time.monotonic()
    try:
        summary = run(scenario, time.process_time).summary()
    except SimFailure as exc:
        print(f"N={members} loss={loss}: FAILED\n{exc}", file=sys.stderr, flush=True)
        return {"members": members, "loss": loss, "stack": stack, "failed": True,
                "replay": scenario.command()}
    row: dict[str, object] = {"members": members, "loss": loss, "stack": stack,
                              "duration_s": duration,
                              "wall_s": round(time.monotonic() - started, 1), **summary}
    repl, losses = summary["replication"], summary["losses"]
    assert isinstance(repl, dict) and isinstance(losses, int)
    # Fetch-by-id requests (one per peer asked) per lost (message, member).
    row["fetch_requests_per_loss"] = round(repl["fetch_requests"] / losses, 3) if losses else 0.0
    print(f"  N={members:5d} loss={loss:.2f} {stack}: {row['wall_s']} s", file=sys.stderr,
          flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--smoke", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--unshared", action="store_true",
                        help="every member decodes and verifies on its own (sync/sim/shared.py "
                             "off): slower, and the CPU figure counts that repeated work")
    parser.add_argument("--no-write", action="store_true", help="do not write the JSON file")
    args = parser.parse_args()
    global SHARED
    SHARED = not args.unshared
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    sizes, duration = SIZES[mode], DURATION[mode]
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    rows = [one(n, loss, duration, args.seed) for n in sizes for loss in LOSSES]
    rows += [one(n, 0.05, duration, args.seed, stack=SDS_R_ONLY) for n in sizes]
    # Heads over one and three run lengths, same group (the middle size), no loss.
    mid = sizes[1]
    short = next(r for r in rows if r["members"] == mid and r["loss"] == 0.0
                 and r["stack"] == NODE)
    long = one(mid, 0.0, 3 * duration, args.seed)
    catchup = one(mid, 0.05, duration, args.seed, catchup_scenario(mid, duration, args.seed))
    failed = [r for r in [*rows, long, catchup] if r.get("failed")]
    repl = catchup.get("replication")
    recon_bytes = None
    if isinstance(repl, dict) and catchup.get("published"):
        moved = repl["recon_bytes"] + repl["transfer_bytes"]
        recon_bytes = round(moved / mid / float(catchup["published"]), 1)  # type: ignore[arg-type]

    def at(n: int, loss: float, key: str, stack: str = NODE) -> float:
        row = next(r for r in rows
                   if r["members"] == n and r["loss"] == loss and r["stack"] == stack)
        value = row.get(key, 0.0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    def growth(stack: str) -> float | None:
        base = at(10, 0.05, "bytes_recv_per_member_event", stack)
        top = at(sizes[-1], 0.05, "bytes_recv_per_member_event", stack)
        return round(top / base, 3) if base else None

    big = sizes[-1]
    result = {
        "mode": mode,
        "sizes": list(sizes),
        "duration_s": duration,
        "stack": "SDS + SDS-R, fetch-by-id, Recon + transfer (as the node)",
        "bytes_growth_5pct": growth(NODE),
        "responses_per_loss_max_n": at(big, 0.05, "responses_per_loss"),
        "requests_per_loss_max_n": at(big, 0.05, "requests_per_loss"),
        "fetch_requests_per_loss_max_n": at(big, 0.05, "fetch_requests_per_loss"),
        "delivery_p50_s_5pct_max_n": at(big, 0.05, "delivery_p50_s"),
        "delivery_p99_s_5pct_max_n": at(big, 0.05, "delivery_p99_s"),
        "bytes_growth_5pct_sds_r_only": growth(SDS_R_ONLY),
        "responses_per_loss_max_n_sds_r_only": at(big, 0.05, "responses_per_loss", SDS_R_ONLY),
        "delivery_p50_s_5pct_max_n_sds_r_only": at(big, 0.05, "delivery_p50_s", SDS_R_ONLY),
        "delivery_p99_s_5pct_max_n_sds_r_only": at(big, 0.05, "delivery_p99_s", SDS_R_ONLY),
        "heads_peak": max(int(r.get("heads_peak", 0)) for r in [*rows, long]),  # type: ignore[call-overload]
        "heads_peak_short": short.get("heads_peak"),
        "heads_peak_long": long.get("heads_peak"),
        "heads_run_lengths_s": [duration, 3 * duration],
        "seeds_failed": len(failed),
        "shared_decode": SHARED,
        "recon_catchup_s": catchup.get("catchup_s"),
        "recon_bytes_per_member_event": recon_bytes,
        "recon_catchup_members": mid,
        "recon_catchup": {k: catchup.get(k) for k in CATCHUP_KEYS},
        "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "wall_s": round(time.monotonic() - started, 1),
        "runs": [*rows, dict(long, heads_run="long"), dict(catchup, run="recon_catchup")],
    }
    print(f"Scale benchmark ({mode}): 20 msgs/s for {duration:.0f} s, then settling; "
          f"load average {result['load_avg'][0]} -> {result['load_avg'][1]} on "
          f"{os.cpu_count()} cores")
    print(f"{'N':>5} {'loss':>5} {'stack':>10} " + " ".join(f"{c[:14]:>14}" for c in COLUMNS))
    for r in rows:
        if r.get("failed"):
            print(f"{r['members']:>5} {r['loss']:>5} {r['stack']!s:>10} FAILED: {r['replay']}")
            continue
        print(f"{r['members']:>5} {r['loss']:>5} {r['stack']!s:>10} "
              + " ".join(f"{r[c]!s:>14}" for c in COLUMNS))
    print("bytes received per member per event by kind, 5% loss:")
    for r in rows:
        if r["loss"] == 0.05 and not r.get("failed"):
            print(f"  N={r['members']} {r['stack']}: {r['recv_by_kind_per_member_event']}")
    print(f"heads_peak over {duration:.0f} s / {3 * duration:.0f} s at N={mid}: "
          f"{result['heads_peak_short']} / {result['heads_peak_long']}")
    print(f"Recon catch-up at N={mid} (5% loss, 30% cut off, churn): "
          f"{result['recon_catchup_s']} s after the last heal/restart, "
          f"{recon_bytes} Recon+transfer bytes per member per event")
    for key in ("bytes_growth_5pct", "bytes_growth_5pct_sds_r_only", "responses_per_loss_max_n",
                "heads_peak", "seeds_failed"):
        print(f"{key}: {result[key]}")
    if args.smoke:
        out = Path(tempfile.gettempdir()) / "scale_bench_smoke.json"
    else:
        out = ROOT / "docs" / "bench" / ("scale_quick.json" if args.quick else "scale.json")
    if not args.no_write:
        out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
