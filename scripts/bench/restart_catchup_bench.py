#!/usr/bin/env python3
"""Catch-up after a restart: how fast the peers of a node killed mid-burst take in its events,
against a fresh node catching up on the same log, measured the same way.

Three real nodes on loopback, default settings (no fast timers): b publishes a burst
(``syncnode publish --lines``) and is killed with SIGKILL while it runs, then restarted on its
data directory; a and c must then hold every event b holds. Then a fresh node d joins a and
must hold them all too. Each node's event count is polled every 50 ms, and each catch-up is
timed two ways:

* ``catchup_after_restart_per_s`` (the slower of a and c) and ``catchup_fresh_per_s`` (d): the
  rate, events taken in from the first new event seen until the last over that time. Issue
  37's crawl was this rate (~30-40 events/s: each Recon session fetched thousands and kept a
  few hundred); it is what a long backlog takes per event.
* ``catchup_after_restart_s`` and ``catchup_fresh_s``: wall time from b's restart (d's start)
  until everything is held, including the wait for a Recon session and the gossip grace
  (``recon.gossip_grace_s``: a session leaves the events of the last 3 s to gossip, which a
  node that just restarted will not resend, so those come one Recon round, up to
  ``recon.interval_s``, later).

No event may be fetched twice: ``refetched`` sums, over a, c and d, the events fetched by Recon
(``recon_events_fetched_total``) beyond those new to the database
(``recon_events_stored_total``), and ``evicted_waiting`` the SDS
``sds_evicted_total{buffer="waiting"}`` (the fetch-evict-refetch loop of issue 37 showed both).

Keys: see ``JSON_KEYS``; the last line of stdout is the JSON, also written to
docs/bench/restart_catchup.json (not with ``--smoke``).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from benchjson import finish, smoke_path  # noqa: E402

from tests.node.burst import events_held, killed_mid_burst, start_on_defaults  # noqa: E402
from tests.node.cluster import metric  # noqa: E402
from tests.node.procs import NodeProcess  # noqa: E402

OUT = ROOT / "docs" / "bench" / "restart_catchup.json"
JSON_KEYS = ("burst", "stored_on_b", "lacked", "catchup_after_restart_s",
             "catchup_after_restart_fetch_s", "catchup_after_restart_per_s", "catchup_fresh_s",
             "catchup_fresh_fetch_s", "catchup_fresh_per_s",
             "refetched", "evicted_waiting", "load_avg_1m")
EVICTED = 'sds_evicted_total{buffer="waiting"}'
TIMEOUT_S = 900.0
POLL_S = 0.05


@dataclass
class CatchUp:
    """One node's catch-up: ``lacked`` events taken in, ``wall_s`` from the start (b's restart,
    d's start) until it held them all, ``fetch_s`` from the first new event it held until
    then, ``rate`` = the events taken in over ``fetch_s`` (the first observation's excluded)."""

    lacked: int
    wall_s: float
    fetch_s: float
    rate: float


def watch(nodes: list[NodeProcess], target: int, started: float) -> list[CatchUp]:
    """Poll each node (every ``POLL_S``) until it holds ``target`` events."""
    deadline = started + TIMEOUT_S
    held0 = {n: events_held(n) for n in nodes}
    first: dict[NodeProcess, tuple[float, int]] = {}
    done: dict[NodeProcess, float] = {}
    while len(done) < len(nodes):
        if time.monotonic() > deadline:
            raise SystemExit(f"not caught up within {TIMEOUT_S:.0f} s: "
                             f"{[events_held(n) for n in nodes]} of {target}")
        for n in nodes:
            if n in done:
                continue
            count, now = events_held(n), time.monotonic()
            if count > held0[n] and n not in first:
                first[n] = (now, count)
            if count >= target:
                done[n] = now
        time.sleep(POLL_S)
    out = []
    for n in nodes:
        t_first, c_first = first.get(n, (done[n], target))
        fetch_s = done[n] - t_first
        rate = (target - c_first) / fetch_s if fetch_s > 0 else math.inf
        out.append(CatchUp(target - held0[n], done[n] - started, fetch_s, rate))
    return out


def run(burst: int, kill_after: int, keep: Path | None) -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix="syncnode-restart-catchup-"))
    try:
        with killed_mid_burst(base, burst, kill_after) as (nodes, stored):
            return measure(base, nodes, stored, burst)
    finally:
        if keep is not None:
            shutil.copytree(base, keep, dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)


def measure(base: Path, nodes: list[NodeProcess], stored: int, burst: int
            ) -> dict[str, object]:
    """Time the catch-up of b's peers, then of a fresh node d (appended to ``nodes``)."""
    a, _, c = nodes
    peers = watch([a, c], stored, time.monotonic())
    d = start_on_defaults(base, "d", a)
    nodes.append(d)
    (fresh,) = watch([d], stored, time.monotonic())
    # The slower peer of b's is the figure (the issue's: both must hold everything).
    slow = min(peers, key=lambda p: p.rate)
    # Nothing fetched twice: every fetched event was new to the database.
    refetched = int(sum(metric(n, "recon_events_fetched_total")
                        - metric(n, "recon_events_stored_total") for n in (a, c, d)))
    evicted = int(sum(metric(n, EVICTED) for n in (a, c, d)))
    return {
        "burst": burst, "stored_on_b": stored, "lacked": [p.lacked for p in peers],
        "catchup_after_restart_s": round(max(p.wall_s for p in peers), 2),
        "catchup_after_restart_fetch_s": [round(p.fetch_s, 2) for p in peers],
        "catchup_after_restart_per_s": _figure(slow.rate),
        "catchup_fresh_s": round(fresh.wall_s, 2),
        "catchup_fresh_fetch_s": round(fresh.fetch_s, 2),
        "catchup_fresh_per_s": _figure(fresh.rate),
        "refetched": refetched, "evicted_waiting": evicted,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def _figure(rate: float) -> int | None:
    """A rate for the JSON: None when the catch-up was too small to time (one observation)."""
    return None if math.isinf(rate) else round(rate)


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
    print(f"{'':24}{'lacked':>14}{'wall s':>8}{'fetch s':>14}{'events/s':>10}")
    print(f"{'after restart (a, c)':24}{result['lacked']!s:>14}"
          f"{result['catchup_after_restart_s']:>8}"
          f"{result['catchup_after_restart_fetch_s']!s:>14}"
          f"{result['catchup_after_restart_per_s']!s:>10}")
    print(f"{'fresh node (d)':24}{result['stored_on_b']:>14}{result['catchup_fresh_s']:>8}"
          f"{result['catchup_fresh_fetch_s']:>14}{result['catchup_fresh_per_s']!s:>10}")
    print(f"refetched {result['refetched']}, evicted from the waiting buffer "
          f"{result['evicted_waiting']}")
    # A smoke-size catch-up may end between two polls: no rate to give then.
    rates = ("catchup_after_restart_per_s", "catchup_fresh_per_s") if args.smoke else ()
    return finish(result, JSON_KEYS, smoke_path("restart_catchup") if args.smoke else OUT,
                  optional=rates)


if __name__ == "__main__":
    sys.exit(main())
