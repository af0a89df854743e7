#!/usr/bin/env python3
"""Catch-up after a restart: how fast the peers of a node killed mid-burst take in its events,
against fresh nodes catching up on the same log, measured the same way.

Three real nodes on loopback, default settings (no fast timers): b publishes a burst
(``syncnode publish --lines``) and is killed with SIGKILL while it runs, then restarted on its
data directory; a and c must then hold every event b holds. Then two fresh nodes d and e join
a together and must hold them all too: two nodes catching up at once, like a and c, since on
a small machine two catching-up nodes share its cores.

* ``catchup_after_restart_per_s`` (a and c) and ``catchup_fresh_per_s`` (d and e): the slower
  node's rate, each node's (``*_per_peer_per_s``) being the events it lacked over the time it
  took them in, by its own records (``tests/harness/catchup_timing.py``): from the start of
  the Recon session that brought the first of them (or the first's arrival, had gossip brought
  it) to the ``received_at`` of the last, waits between sessions included (a session that left
  b's newest events to the gossip grace, which b never resends, made a and c wait a round for
  them); the wait for the first session is not (``catchup_*_start_s``: from b's return, or d's
  and e's start, until it began), and each node's time is ``catchup_*_span_s``.
  Issue 37's crawl was this rate (~30-40 events/s: each Recon session fetched thousands and
  kept a few hundred).
* ``catchup_after_restart_s`` and ``catchup_fresh_s``: wall time from b's restart (d's and e's
  start, side by side) until both hold everything, waits for Recon rounds included: what a
  user waits. ``lacked`` and ``fresh_lacked``: what each stored from then on (a and c: every
  event of b's they stored after b answered again; d and e: the whole log).

No event may be fetched twice: ``refetched`` sums, over a, c, d and e, the events fetched by
Recon (``recon_events_fetched_total``) beyond those new to the database
(``recon_events_stored_total``), ``fetched_waiting`` the fetched events SDS had to hold for
a dependency (``sds_fetched_waiting_total``) and ``evicted_waiting`` the SDS
``sds_evicted_total{buffer="waiting"}`` (the fetch-evict-refetch loop of issue 37 showed both;
gossip copies of b's resends can still be evicted, ``docs/node.md``).

Keys: see ``JSON_KEYS``; the last line of stdout is the JSON, also written to
docs/bench/restart_catchup.json (not with ``--smoke``; ``--out`` elsewhere).

A small catch-up, where the fixed costs of a session dominate (the chaos run's restarts leave
peers ~900 events behind): ``--burst 2000 --kill-after 1200 --out /tmp/small.json`` (a and c
then lack the ~1,000-1,800 events gossip had not brought before the kill; about 25 s).
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
from tests.harness.catchup_timing import fetch_sessions, timed_catchup  # noqa: E402
from tests.harness.cluster import channel_events, metric  # noqa: E402
from tests.harness.procs import NodeProcess  # noqa: E402

OUT = ROOT / "docs" / "bench" / "restart_catchup.json"
JSON_KEYS = ("burst", "stored_on_b", "lacked", "fresh_lacked", "catchup_after_restart_s",
             "catchup_after_restart_per_s", "catchup_after_restart_per_peer_per_s",
             "catchup_fresh_s", "catchup_fresh_per_s", "catchup_fresh_per_peer_per_s",
             "refetched", "fetched_waiting", "evicted_waiting", "load_avg_1m")
RATES = ("catchup_after_restart_per_s", "catchup_fresh_per_s")
EVICTED = 'sds_evicted_total{buffer="waiting"}'
CHANNEL = "general"
TIMEOUT_S = 900.0
POLL_S = 0.05


@dataclass
class CatchUp:
    """Two nodes catching up at once: what each stored from the start on, the seconds until
    both held everything, each one's rate, span and wait for its first session (see the
    module) and the slower rate."""

    lacked: list[int]
    wall_s: float
    per_peer: list[int | None]
    span_s: list[float]
    start_s: list[float]

    @property
    def rate(self) -> int | None:
        rates = [r for r in self.per_peer if r is not None]
        return min(rates) if len(rates) == len(self.per_peer) else None


def watch(nodes: list[NodeProcess], target: int, since_ms: int) -> CatchUp:
    """Poll the nodes until each holds ``target`` events, then time what each stored from
    ``since_ms`` on by its own records."""
    started = time.monotonic()
    while min(events_held(n) for n in nodes) < target:
        if time.monotonic() > started + TIMEOUT_S:
            raise SystemExit(f"not caught up within {TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)
    wall_s = round(time.monotonic() - started, 2)
    timed = []
    for node in nodes:
        arrivals = [int(e["received_at"]) for e in channel_events(node, CHANNEL)
                    if int(e["received_at"]) >= since_ms]
        timed.append(timed_catchup(arrivals, fetch_sessions(node.stderr_path)))
    return CatchUp([t.events if t else 0 for t in timed], wall_s,
                   [t.rate if t else None for t in timed],
                   [round(t.seconds, 3) if t else 0.0 for t in timed],
                   [round((t.start_ms - since_ms) / 1000, 2) if t else 0.0 for t in timed])


def measure(base: Path, nodes: list[NodeProcess], stored: int, burst: int
            ) -> dict[str, object]:
    """Time the catch-up of b's peers, then of two fresh nodes (appended to ``nodes``)."""
    a, b, c = nodes
    restart = watch([a, c], stored, b.answered_ms)
    # Started side by side, so that their catch-ups overlap as a's and c's did.
    since_ms = int(time.time() * 1000)
    with ThreadPoolExecutor(2) as pool:
        fresh_nodes = list(pool.map(lambda name: start_on_defaults(base, name, a), "de"))
    nodes += fresh_nodes
    fresh = watch(fresh_nodes, stored, since_ms)
    takers = {"a": a, "c": c, "d": fresh_nodes[0], "e": fresh_nodes[1]}

    def per_node(name: str) -> dict[str, int]:
        return {label: int(metric(n, name)) for label, n in takers.items()}

    # Nothing fetched twice: every fetched event was new to the database.
    fetched, stored_new = (per_node("recon_events_fetched_total"),
                           per_node("recon_events_stored_total"))
    refetched = {label: fetched[label] - stored_new[label] for label in takers}
    evicted = per_node(EVICTED)
    waited = per_node("sds_fetched_waiting_total")
    return {
        "burst": burst, "stored_on_b": stored, "lacked": restart.lacked,
        "catchup_after_restart_s": restart.wall_s,
        "catchup_after_restart_per_s": restart.rate,
        "catchup_after_restart_per_peer_per_s": restart.per_peer,
        "catchup_after_restart_span_s": restart.span_s,
        "catchup_after_restart_start_s": restart.start_s,
        "fresh_lacked": fresh.lacked,
        "catchup_fresh_s": fresh.wall_s,
        "catchup_fresh_per_s": fresh.rate,
        "catchup_fresh_per_peer_per_s": fresh.per_peer,
        "catchup_fresh_span_s": fresh.span_s,
        "catchup_fresh_start_s": fresh.start_s,
        "refetched": sum(refetched.values()), "evicted_waiting": sum(evicted.values()),
        "refetched_per_node": refetched, "evicted_waiting_per_node": evicted,
        "fetched_waiting": sum(waited.values()), "fetched_waiting_per_node": waited,
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
    parser.add_argument("--out", type=Path, help=f"write the JSON here instead of {OUT.name}")
    args = parser.parse_args()
    burst, kill_after = (1_000, 500) if args.smoke else (args.burst, args.kill_after)
    result = run(burst, kill_after, args.keep)
    print(f"{'':24}{'lacked':>14}{'wall s':>8}{'events/s':>10}{'per node':>16}"
          f"{'span s':>18}{'wait s':>14}")
    for label, tag, lacked in (("after restart (a, c)", "after_restart", result["lacked"]),
                               ("fresh (d, e)", "fresh", result["fresh_lacked"])):
        print(f"{label:24}{lacked!s:>14}{result[f'catchup_{tag}_s']!s:>8}"
              f"{result[f'catchup_{tag}_per_s']!s:>10}"
              f"{result[f'catchup_{tag}_per_peer_per_s']!s:>16}"
              f"{result[f'catchup_{tag}_span_s']!s:>18}{result[f'catchup_{tag}_start_s']!s:>14}")
    print(f"refetched {result['refetched']} {result['refetched_per_node']}, fetched and left "
          f"waiting {result['fetched_waiting']} {result['fetched_waiting_per_node']}, evicted "
          f"from the waiting buffer {result['evicted_waiting']} "
          f"{result['evicted_waiting_per_node']}")
    # A smoke-size catch-up may come in one gossip delivery: no time passed, no rate.
    out = smoke_path("restart_catchup") if args.smoke else args.out or OUT
    return finish(result, JSON_KEYS, out,
                  optional=RATES if args.smoke else ())


if __name__ == "__main__":
    sys.exit(main())
