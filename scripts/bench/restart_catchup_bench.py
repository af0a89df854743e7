#!/usr/bin/env python3
"""Catch-up after a restart: how fast the peers of a node killed mid-burst take in its events,
against fresh nodes catching up on the same log, measured the same way.

Three real nodes on loopback, default settings (no fast timers): b publishes a burst
(``syncnode publish --lines``) and is killed with SIGKILL while it runs, then restarted on its
data directory; a and c must then hold every event b holds. Then two fresh nodes d and e join
a together and must hold them all too: two nodes catching up at once, like a and c, since on
a small machine two catching-up nodes share its cores. Every node's event count is polled
every 50 ms, and each catch-up is timed two ways:

* ``catchup_after_restart_per_s`` (a and c) and ``catchup_fresh_per_s`` (d and e): the events
  the pair took in over the time either of them was taking any in (the polling intervals in
  which a count rose). Idle intervals are left out: between two Recon sessions nothing is
  fetched, and the first session after a restart leaves b's newest events to gossip for
  ``recon.gossip_grace_s`` (3 s; b will not resend them, so the round after the grace
  fetches them).
  Issue 37's crawl was this rate (~30-40 events/s: each Recon session fetched thousands and
  kept a few hundred). ``*_per_peer_per_s``: the same per node (its own active intervals).
* ``catchup_after_restart_s`` and ``catchup_fresh_s``: wall time from b's restart (d's and e's
  start, side by side) until both hold everything, waits for Recon rounds included: what a
  user waits. ``lacked`` and ``fresh_lacked``: what each lacked when the polling began.

No event may be fetched twice: ``refetched`` sums, over a, c, d and e, the events fetched by
Recon (``recon_events_fetched_total``) beyond those new to the database
(``recon_events_stored_total``), and ``evicted_waiting`` the SDS
``sds_evicted_total{buffer="waiting"}`` (the fetch-evict-refetch loop of issue 37 showed both).

Keys: see ``JSON_KEYS``; the last line of stdout is the JSON, also written to
docs/bench/restart_catchup.json (not with ``--smoke``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from benchjson import finish, smoke_path  # noqa: E402

from tests.harness.burst import events_held, killed_mid_burst, start_on_defaults  # noqa: E402
from tests.harness.cluster import metric  # noqa: E402
from tests.harness.procs import NodeProcess  # noqa: E402

OUT = ROOT / "docs" / "bench" / "restart_catchup.json"
JSON_KEYS = ("burst", "stored_on_b", "lacked", "fresh_lacked", "catchup_after_restart_s",
             "catchup_after_restart_per_s", "catchup_after_restart_per_peer_per_s",
             "catchup_fresh_s", "catchup_fresh_per_s", "catchup_fresh_per_peer_per_s",
             "refetched", "evicted_waiting", "load_avg_1m")
RATES = ("catchup_after_restart_per_s", "catchup_fresh_per_s")
EVICTED = 'sds_evicted_total{buffer="waiting"}'
TIMEOUT_S = 900.0
POLL_S = 0.05


@dataclass
class CatchUp:
    """Two nodes catching up at once: what each lacked at the start, the seconds until both
    held everything, and the rates (events taken in over active seconds: see the module)."""

    lacked: list[int]
    wall_s: float
    rate: int | None
    per_peer: list[int | None]


def _rate(events: int, seconds: float) -> int | None:
    """None when the catch-up was too quick to time (it ended within one polling interval)."""
    return round(events / seconds) if seconds > 0 and events else None


def watch(nodes: list[NodeProcess], target: int) -> CatchUp:
    """Poll the nodes (every ``POLL_S``) until each holds ``target`` events. A rate counts the
    events taken in over the intervals in which they were (a node may have begun before the
    first poll: what it took in before is neither counted nor timed)."""
    started = last = time.monotonic()
    counts = [events_held(n) for n in nodes]
    lacked = [target - c for c in counts]
    taken, active, active_any = [0] * len(nodes), [0.0] * len(nodes), 0.0
    while min(counts) < target:
        if last > started + TIMEOUT_S:
            raise SystemExit(f"not caught up within {TIMEOUT_S:.0f} s: {counts} of {target}")
        time.sleep(POLL_S)
        now_counts = [events_held(n) for n in nodes]
        now = time.monotonic()
        rose = [c - before for c, before in zip(now_counts, counts, strict=True)]
        active_any += (now - last) if any(r > 0 for r in rose) else 0.0
        for i, r in enumerate(rose):
            if r > 0:
                taken[i] += r
                active[i] += now - last
        counts, last = now_counts, now
    return CatchUp(lacked, round(last - started, 2), _rate(sum(taken), active_any),
                   [_rate(n, s) for n, s in zip(taken, active, strict=True)])


def measure(base: Path, nodes: list[NodeProcess], stored: int, burst: int
            ) -> dict[str, object]:
    """Time the catch-up of b's peers, then of two fresh nodes (appended to ``nodes``)."""
    a, _, c = nodes
    restart = watch([a, c], stored)
    # Started side by side, so that their catch-ups overlap as a's and c's did.
    with ThreadPoolExecutor(2) as pool:
        fresh_nodes = list(pool.map(lambda name: start_on_defaults(base, name, a), "de"))
    nodes += fresh_nodes
    fresh = watch(fresh_nodes, stored)
    takers = [a, c, *fresh_nodes]
    # Nothing fetched twice: every fetched event was new to the database.
    refetched = int(sum(metric(n, "recon_events_fetched_total")
                        - metric(n, "recon_events_stored_total") for n in takers))
    evicted = int(sum(metric(n, EVICTED) for n in takers))
    return {
        "burst": burst, "stored_on_b": stored, "lacked": restart.lacked,
        "catchup_after_restart_s": restart.wall_s,
        "catchup_after_restart_per_s": restart.rate,
        "catchup_after_restart_per_peer_per_s": restart.per_peer,
        "fresh_lacked": fresh.lacked,
        "catchup_fresh_s": fresh.wall_s,
        "catchup_fresh_per_s": fresh.rate,
        "catchup_fresh_per_peer_per_s": fresh.per_peer,
        "refetched": refetched, "evicted_waiting": evicted,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def run(burst: int, kill_after: int, keep: Path | None) -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix="syncnode-restart-catchup-"))
    try:
        with killed_mid_burst(base, burst, kill_after) as (nodes, stored):
            return measure(base, nodes, stored, burst)
    finally:
        if keep is not None:
            shutil.copytree(base, keep, dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny run (the test suite)")
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--kill-after", type=int, default=6_000,
                        help="kill b once it stored this many events")
    parser.add_argument("--keep", type=Path, help="copy the nodes' directories here")
    args = parser.parse_args()
    burst, kill_after = (2_000, 1_000) if args.smoke else (args.burst, args.kill_after)
    result = run(burst, kill_after, args.keep)
    print(f"{'':24}{'lacked':>14}{'wall s':>8}{'events/s':>10}{'per node':>16}")
    for label, tag, lacked in (("after restart (a, c)", "after_restart", result["lacked"]),
                               ("fresh (d, e)", "fresh", result["fresh_lacked"])):
        print(f"{label:24}{lacked!s:>14}{result[f'catchup_{tag}_s']!s:>8}"
              f"{result[f'catchup_{tag}_per_s']!s:>10}"
              f"{result[f'catchup_{tag}_per_peer_per_s']!s:>16}")
    print(f"refetched {result['refetched']}, evicted from the waiting buffer "
          f"{result['evicted_waiting']}")
    # A smoke-size catch-up may end within one polling interval: no rate to give then.
    return finish(result, JSON_KEYS, smoke_path("restart_catchup") if args.smoke else OUT,
                  optional=RATES if args.smoke else ())


if __name__ == "__main__":
    sys.exit(main())
