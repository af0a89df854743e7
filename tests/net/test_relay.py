"""Reachability on an emulated internet (issue 27, finding 2): public nodes find themselves
public and relay, home nodes find themselves private, reserve at two relays, are reached through
them (a relayed address given to ``syncnode join``) and hole-punch to a direct connection; a
connection that cannot be punched carries gossip and Recon through the relay.

The joins by relayed address exercise relaying and hole punching independently of peer exchange
(tests/net/test_scenarios.py: joining one public node only, public-node loss, a partition). On
b4adb7a this fails at the first step: no verdict, no relay, no relayed address.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cluster import metric, publish_many, wait_for
from tests.net.netns import Internet
from tests.net.world import QUICK_DIAL, build_world, logs_identical, wait_all


def _relayed_addrs(node) -> list[str]:  # type: ignore[no-untyped-def]
    return list(node.get("/v1/status").get("network", {}).get("relayed_addrs", []))


def _reachability(node) -> str | None:  # type: ignore[no-untyped-def]
    return node.get("/v1/status").get("network", {}).get("reachability")  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_home_nodes_reserve_relay_and_punch_through_nat(
        internet: Internet, tmp_path: Path) -> None:
    # h2 never hole-punches: a connection it accepts through a relay stays relayed.
    no_punch = {"SYNCNODE_REACHABILITY_HOLE_PUNCH": "false"}
    with build_world(internet, tmp_path, publics=2, homes=3, per_home=1, env=QUICK_DIAL,
                     home_env={2: no_punch}) as world:
        p0, p1 = world.public
        h0, h1, h2 = world.home
        for node in (p1, h0, h1, h2):
            node.join(p0.address)
        for node in (h0, h1, h2):
            node.join(p1.address)
        # Verdicts from dial-backs; both home nodes reserve at both relays.
        wait_all(world.public, lambda n: _reachability(n) == "public", 60,
                 "public nodes did not find themselves public")
        wait_all(world.home, lambda n: _reachability(n) == "private"
                 and len(_relayed_addrs(n)) >= 2, 60,
                 "home nodes did not see they are behind NAT and reserve at two relays")
        # h0 reaches h1 only through a relay (NAT drops inbound); h1 punches a direct path.
        # (``syncnode join``'s API call: an HTTP error fails the test.)
        assert h0.join(_relayed_addrs(h1)[0]) == h1.peer_id
        wait_for(lambda: world.paths(h0).get(h1.peer_id) == "direct", 60,
                 "relayed connection was not upgraded to a direct one")
        address = next(p["address"] for p in h0.get("/v1/peers")["connected"]
                       if p["peer_id"] == h1.peer_id)
        assert internet.router_wan_ip(h1.host.home or 0) in address, address
        # h0 also joins h2 through a relay; h2 accepted and does not punch: gossip and Recon
        # run over the relayed connection, within the relay's limits.
        assert h0.join(_relayed_addrs(h2)[0]) == h2.peer_id
        publish_many(h0, "general", [f"relayed-{i}" for i in range(3)])
        publish_many(h2, "general", [f"relayed-back-{i}" for i in range(3)])
        wait_for(lambda: logs_identical(world.home, "general", 6), 60,
                 "events did not cross the relayed connection")
        assert world.paths(h2).get(h0.peer_id) == "relayed"
        assert sum(metric(p, "relay_forwarded_bytes_total") for p in world.public) > 0
        # The same facts as /metrics shows them (docs/node.md).
        assert metric(p0, "reachability_state") == 2 and metric(h0, "reachability_state") == 1
        assert metric(p0, "relay_serving") == 1 and metric(h0, "relay_reservations") >= 2
        assert sum(metric(n, "dialback_served_total") for n in world.public) > 0
        assert sum(metric(n, "hole_punch_ok_total") for n in (h0, h1)) >= 1
        assert metric(h0, "peers_direct") >= 1 and metric(h2, "peers_relayed") >= 1
