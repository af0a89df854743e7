"""Issue 38's attacks on reachability, the relay service, liveness and the connection manager,
for ``attack_bench.py`` (a helper module, not a benchmark). Each runs against fresh node
processes of its own on loopback, with real hostile py-libp2p hosts
(tests/harness/hostile_reach.py):

* dial-back lies: two identities answer ``ok 198.18.0.99`` without dialling at a node on its
  defaults (``dialback_lie_public``: did it go public?);
* one source's relay reservations: ``identities`` identities from this process ask a node
  serving as a relay for a reservation (``relay_reservations_one_source_max``: granted);
* liveness: half of ``identities`` never answer the victim's pings, half answer 6 s late,
  while it holds an honest peer (``liveness_honest_closed``: honest drops over the window);
* eclipse: a dozen identities join the GossipSub mesh of a victim with small watermarks that
  holds three honest peers it dialled (``eclipse_honest_min``: the fewest it kept).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import trio

from tests.harness import hostile_reach as hostile
from tests.harness.cluster import metric, wait_for
from tests.harness.procs import NodeProcess

__all__ = ["TARGETS", "reach_attacks"]

TARGETS = ("dialback_lie_public false, relay_reservations_one_source_max <= 4 (the default "
           "share), liveness_honest_closed = 0")
# (relay identities, liveness identities, liveness window s, eclipse window s)
SIZES = {"full": (34, 8, 40.0, 20.0), "quick": (34, 8, 30.0, 15.0),
         "smoke": (8, 4, 12.0, 6.0)}
Row = tuple[str, str, str]


def reach_attacks(base: Path, size: str) -> tuple[dict[str, Any], list[Row]]:
    """Run the four attacks; returns (JSON keys, table rows)."""
    relay_ids, ping_ids, ping_window, eclipse_window = SIZES[size]
    rows: list[Row] = []
    result: dict[str, Any] = {}
    started: list[NodeProcess] = []

    def start(name: str, env: dict[str, str] | None = None) -> NodeProcess:
        started.append(NodeProcess(base / name, env=env).start())
        return started[-1]

    try:
        victim = start("lie-victim")
        seen = trio.run(hostile.lie_to, victim, 2)
        result["dialback_lie_public"] = seen["reachability_state"] == 2
        rows.append(("14 dial-back lies, 2 ids", "ok 198.18.0.99, never dialled",
                     f"state {seen['reachability_state']:.0f}, relay {seen['relay_serving']:.0f}"
                     f", lies {seen['dialback_lies_total']:.0f}, charged "
                     f"{seen['penalties']:.0f}"))

        relay = start("relay", {"SYNCNODE_REACHABILITY_SERVE_RELAY": "on"})
        wait_for(lambda: metric(relay, "relay_serving") == 1, 60, "the relay never served")
        granted = trio.run(hostile.grab_reservations, relay.listen_addrs[0], relay.peer_id,
                           relay_ids)
        result["relay_reservations_one_source_max"] = granted
        rows.append((f"15 relay, {relay_ids} ids one source", "a reservation each",
                     f"{granted} granted, refused "
                     f"{metric(relay, 'relay_share_refused_reservations_total'):.0f}"))

        live = start("live-victim")
        ids = hostile.dialled_by(live, [start("live-honest")])
        t0 = time.monotonic()
        drops, closed = trio.run(hostile.stall_pings, live, ids, ping_ids, ping_window, 6.0)
        result["liveness_honest_closed"] = drops
        rows.append((f"16 late pings, {ping_ids} ids", "never / 6 s late (timeout 5 s)",
                     f"honest drops {drops}, liveness closes {closed}, "
                     f"{time.monotonic() - t0:.0f} s"))

        ecl = start("ecl-victim", hostile.SQUAT_VICTIM_ENV)
        honest = [start(f"ecl-h{i}", hostile.SQUAT_HONEST_ENV) for i in range(3)]
        ids = hostile.dialled_by(ecl, honest)
        fewest, squatters = trio.run(hostile.squat, ecl, ids, 12, eclipse_window)
        result["eclipse_honest_min"] = fewest
        rows.append((f"17 eclipse, {squatters} mesh squatters", "watermarks 2/6, 3 dialled",
                     f"fewest honest held {fewest} of 3"))
    finally:
        for node in started:
            node.kill()
    return result, rows
