"""Issue 38's attacks on reachability, the relay service, liveness and the connection manager,
for ``attack_bench.py`` (a helper module, not a benchmark). Each runs against fresh nodes of
its own on loopback, with real hostile py-libp2p hosts (tests/harness/hostile_reach.py):

* dial-back lies: two identities answer ``ok 198.18.0.99`` without dialling at a node on its
  defaults (``dialback_lie_public``: did it go public?);
* one source's relay reservations: ``identities`` identities from this process ask a node
  serving as a relay for a reservation (``relay_reservations_one_source_max``: granted);
* liveness: half of ``identities`` never answer the victim's pings, half answer 6 s late,
  while it holds an honest peer (``liveness_honest_closed``: honest drops over the window);
* eclipse: a dozen identities join the GossipSub mesh of a victim with small watermarks that
  holds three honest peers it dialled (``eclipse_honest_min``: the fewest it kept).

The full and quick sizes run each attack in turn on node processes started just before it. The
smoke size runs the same four steps on nodes in this process (tests.harness.inproc), started
at once, and the four attacks side by side: they share no node, so each still checks its own
thing, and the smoke pays one start-up and the longest attack instead of eight process starts
and the sum of the attacks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import trio

from tests.harness import hostile_reach as hostile
from tests.harness.cluster import metric, wait_for
from tests.harness.inproc import InProcessNode, start_all
from tests.harness.procs import NodeApi, NodeProcess

__all__ = ["TARGETS", "reach_attacks"]

TARGETS = ("dialback_lie_public false, relay_reservations_one_source_max <= 4 (the default "
           "share), liveness_honest_closed = 0")
# (relay identities, liveness identities, liveness window s, eclipse window s)
SIZES = {"full": (34, 8, 40.0, 20.0), "quick": (34, 8, 30.0, 15.0),
         "smoke": (8, 4, 7.0, 3.0)}
Row = tuple[str, str, str]
Outcome = tuple[dict[str, Any], Row]
# Each attack's nodes: (name, env) of its victim, then of the honest nodes it needs.
_NODES: dict[str, list[tuple[str, dict[str, str] | None]]] = {
    "lies": [("lie-victim", None)],
    "relay": [("relay", {"SYNCNODE_REACHABILITY_SERVE_RELAY": "on"})],
    "liveness": [("live-victim", None), ("live-honest", None)],
    "eclipse": [("ecl-victim", hostile.SQUAT_VICTIM_ENV),
                *((f"ecl-h{i}", hostile.SQUAT_HONEST_ENV) for i in range(3))],
}


def _lies(victim: NodeApi) -> Outcome:
    seen = trio.run(hostile.lie_to, victim, 2)
    return {"dialback_lie_public": seen["reachability_state"] == 2}, (
        "14 dial-back lies, 2 ids", "ok 198.18.0.99, never dialled",
        f"state {seen['reachability_state']:.0f}, relay {seen['relay_serving']:.0f}, lies "
        f"{seen['dialback_lies_total']:.0f}, charged {seen['penalties']:.0f}")


def _relay(relay: NodeApi, identities: int) -> Outcome:
    wait_for(lambda: metric(relay, "relay_serving") == 1, 60, "the relay never served")
    granted = trio.run(hostile.grab_reservations, relay.listen_addrs[0], relay.peer_id,
                       identities)
    return {"relay_reservations_one_source_max": granted}, (
        f"15 relay, {identities} ids one source", "a reservation each",
        f"{granted} granted, refused "
        f"{metric(relay, 'relay_share_refused_reservations_total'):.0f}")


def _liveness(live: NodeApi, honest: NodeApi, identities: int, window_s: float) -> Outcome:
    ids = hostile.dialled_by(live, [honest])
    t0 = time.monotonic()
    drops, closed = trio.run(hostile.stall_pings, live, ids, identities, window_s, 6.0)
    return {"liveness_honest_closed": drops}, (
        f"16 late pings, {identities} ids", "never / 6 s late (timeout 5 s)",
        f"honest drops {drops}, liveness closes {closed}, {time.monotonic() - t0:.0f} s")


def _eclipse(victim: NodeApi, honest: list[NodeApi], window_s: float) -> Outcome:
    ids = hostile.dialled_by(victim, honest)
    fewest, squatters = trio.run(hostile.squat, victim, ids, 12, window_s)
    return {"eclipse_honest_min": fewest}, (
        f"17 eclipse, {squatters} mesh squatters", "watermarks 2/6, 3 dialled",
        f"fewest honest held {fewest} of 3")


def reach_attacks(base: Path, size: str) -> tuple[dict[str, Any], list[Row]]:
    """Run the four attacks; returns (JSON keys, table rows)."""
    relay_ids, ping_ids, ping_window, eclipse_window = SIZES[size]
    attacks: dict[str, Callable[[list[NodeApi]], Outcome]] = {
        "lies": lambda n: _lies(n[0]),
        "relay": lambda n: _relay(n[0], relay_ids),
        "liveness": lambda n: _liveness(n[0], n[1], ping_ids, ping_window),
        "eclipse": lambda n: _eclipse(n[0], n[1:], eclipse_window),
    }
    started: list[NodeApi] = []
    outcomes: list[Outcome] = []
    try:
        if size == "smoke":
            nodes = {attack: [InProcessNode(base / name, env=env) for name, env in specs]
                     for attack, specs in _NODES.items()}
            started.extend(n for group in nodes.values() for n in group)
            start_all([n for n in started if isinstance(n, InProcessNode)])
            with ThreadPoolExecutor(len(attacks)) as pool:
                futures = [pool.submit(run, list(nodes[attack]))
                           for attack, run in attacks.items()]
                outcomes = [f.result() for f in futures]
        else:
            for attack, run in attacks.items():
                group = []
                for name, env in _NODES[attack]:
                    started.append(NodeProcess(base / name, env=env).start())
                    group.append(started[-1])
                outcomes.append(run(group))
    finally:
        for node in started:
            node.kill()
    result: dict[str, Any] = {}
    for figures, _row in outcomes:
        result.update(figures)
    return result, [row for _figures, row in outcomes]
