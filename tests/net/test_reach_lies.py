"""Issue 38, finding 1 on an emulated internet: dial-back liars at global addresses, each its
own network (``NET_ENV``), tell a node behind NAT that they reached it (``ok`` + the IP they
see it on, its router's) and dial nothing. On d9bdd2e two such successes made it public, and a
node that believes it is public stops holding relay reservations: new peers could no longer
reach it. Now a success whose dial-back never reached the node's listener is refused, counted
and charged, and the node finds itself private from the honest public nodes' failures."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.harness.cluster import metric, wait_for
from tests.net.netns import Host, Internet
from tests.net.world import QUICK_DIAL, build_world, wait_all


@contextmanager
def _liars(hosts: list[Host], claim: str) -> Iterator[Callable[[], list[str]]]:
    """A liar process in each host's namespace, started at once; yields a function that waits
    for their multiaddrs (they start while the caller starts its nodes)."""
    procs = [subprocess.Popen(
        ["ip", "netns", "exec", host.ns, sys.executable, "-m", "tests.net.liar",
         f"/ip4/{host.ip}/tcp/4100", claim],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        for host in hosts]

    def addresses() -> list[str]:
        return [proc.stdout.readline().strip() for proc in procs if proc.stdout is not None]

    try:
        yield addresses
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(30)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_liars_on_the_internet_do_not_make_a_node_behind_nat_public(
        internet: Internet, tmp_path: Path) -> None:
    # The liars' hosts come first (p0, p1): their processes start beside the nodes.
    liar_hosts = [internet.add_public(), internet.add_public()]
    claim = internet.router_wan_ip(0)  # what a liar sees h0 on (home 0, built next): a lie
    with _liars(liar_hosts, claim) as liar_addresses, \
            build_world(internet, tmp_path, publics=2, homes=1, per_home=1,
                        env=QUICK_DIAL) as world:
        p0, p1 = world.public
        [h0] = world.home
        liar0, liar1 = liar_addresses()
        assert "/p2p/" in liar0 and "/p2p/" in liar1, (liar0, liar1)
        p1.join(p0.address)
        for address in (p0.address, p1.address, liar0, liar1):
            h0.join(address)
        wait_for(lambda: metric(h0, "dialback_lies_total") >= 2
                 or metric(h0, "reachability_state") == 2, 60,
                 "h0 never weighed the liars' answers")
        assert metric(h0, "reachability_state") != 2  # d9bdd2e: public (2)
        assert metric(h0, 'dialback_lies_total{reason="unverified"}') >= 2
        assert metric(h0, 'peer_penalties_total{reason="dialback_unverified"}') >= 2
        # The honest public nodes' failures decide: private, reserving at relays.
        wait_all([h0], lambda n: n.get("/v1/status")["network"]["reachability"]
                 == "private" and len(n.get("/v1/status")["network"]["relays"]) >= 1,
                 60, "h0 did not find itself private and reserve a relay")
