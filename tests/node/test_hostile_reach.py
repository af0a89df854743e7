"""Issue 38, findings 1, 4 and 6: hostile libp2p hosts against reachability, the relay service,
liveness and the connection manager of real node processes (tests/harness/hostile_reach.py).

On d9bdd2e two free identities on the node's own machine answering ``ok 198.18.0.99`` to the
dial-back protocol made it public (and a relay) within seconds, and one process took every
relay reservation (or circuit): those tests fail there. The liveness and eclipse probes held
there too (GossipSub's peer scoring kept the peers the victim dialled in its mesh, so they were
protected from pruning); they stay as guards, and the pruning rule that no longer leans on the
mesh is tested on its own in tests/sync/membership/test_connmanager.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.p2p import P2PConfig
from node.p2p.frames import DialError
from node.p2p.run import open_host
from sync.reachability import ReachabilityConfig
from tests.harness.cluster import metric, wait_for
from tests.harness.hostile_reach import (
    SQUAT_HONEST_ENV,
    SQUAT_VICTIM_ENV,
    dialled_by,
    grab_reservations,
    lie_to,
    squat,
    stall_pings,
)
from tests.harness.inproc import InProcessNode
from tests.harness.procs import NodeProcess, start_all

pytestmark = pytest.mark.timeout(240)


@pytest.mark.slow
def test_dialback_liars_do_not_make_a_node_public(tmp_path: Path) -> None:
    # Default settings: serve_relay = "auto", two confirmations.
    node = InProcessNode(tmp_path / "victim").start()
    try:
        seen = trio.run(lie_to, node, 2)
        assert seen["reachability_state"] == 0, seen  # unknown, as before the lies
        assert seen["relay_serving"] == 0, seen
        assert seen["dialback_lies_total"] >= 2 and seen["penalties"] >= 2, seen
        assert node.status()["network"]["reachability"] == "unknown"
    finally:
        node.kill()


@pytest.mark.slow
def test_one_source_gets_only_its_share_of_relay_reservations(tmp_path: Path) -> None:
    # Default share: 4 reservations per /24; every identity here comes from 127.0.0.1.
    node = InProcessNode(tmp_path / "relay", env={
        "SYNCNODE_REACHABILITY_SERVE_RELAY": "on"}).start()
    try:
        wait_for(lambda: metric(node, "relay_serving") == 1, 60, "the relay never served")
        started = time.monotonic()
        granted = trio.run(grab_reservations, node.listen_addrs[0], node.peer_id, 12)
        assert granted == 4, granted  # d9bdd2e: 12 of 12
        assert metric(node, "relay_share_refused_reservations_total") >= 8
        print(f"12 identities, {granted} reservations, {time.monotonic() - started:.1f} s")
    finally:
        node.kill()


@dataclass
class Probes:
    """The liveness probe's victim and the honest peer it dialled, and the eclipse probe's
    outcome (the fewest honest peers its victim held, squatters connected), to come."""

    pinged: NodeProcess
    pinged_honest: set[str]
    squatted: Future[tuple[int, int]]


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Probes]:
    """Both probes' node processes, started side by side (their start-ups overlap on both
    cores); the eclipse probe then runs in a thread while the liveness probe (the next test,
    ~35 s of default ping timers) runs beside it. They share no node: each victim sees only
    its own attack."""
    base = tmp_path_factory.mktemp("hostile-reach")
    nodes = [*(NodeProcess(base / f"h{i}", env=SQUAT_HONEST_ENV) for i in range(3)),
             NodeProcess(base / "squat-victim", env=SQUAT_VICTIM_ENV),
             NodeProcess(base / "ping-honest"), NodeProcess(base / "ping-victim")]
    try:
        start_all(nodes)
        *honest, squatted, ping_honest, pinged = nodes
        with ThreadPoolExecutor(1) as pool:
            # Watched until the victim pruned in five more housekeeping rounds after the
            # first (one every 2 s: the first prunes the bulk, each later one whoever came
            # back or left the mesh), at most 20 s.
            eclipse = pool.submit(lambda: trio.run(squat, squatted, dialled_by(squatted, honest),
                                                   12, 20.0, 5))
            yield Probes(pinged, dialled_by(pinged, [ping_honest]), eclipse)
    finally:
        for node in nodes:
            node.kill()


@pytest.mark.slow
def test_late_and_silent_pingers_close_no_honest_connection(probes: Probes) -> None:
    # Default liveness settings: a ping every 5 s, 5 s to answer, closed after 3 failures.
    drops, closed = trio.run(stall_pings, probes.pinged, probes.pinged_honest, 8, 40.0, 6.0)
    assert drops == 0, (drops, closed)
    print(f"honest drops {drops}, liveness closes {closed}")


@pytest.mark.slow
def test_mesh_squatters_do_not_prune_the_peers_a_node_dialled(probes: Probes) -> None:
    # GossipSub mesh members are protected from pruning, and a dozen squatters join the mesh
    # of a victim whose high watermark is 6 (SQUAT_VICTIM_ENV).
    fewest, squatters = probes.squatted.result(timeout=120)
    # Pruned below the low mark, the victim would not dial again (above it in all).
    assert fewest >= 2, (fewest, squatters)


@pytest.mark.trio
async def test_a_source_network_gets_only_its_share_of_circuits() -> None:
    # In-process hosts (every one on 127.0.0.1, one network): a share of one circuit.
    config = P2PConfig(reachability=ReachabilityConfig(relay_circuits_per_network=1))
    async with AsyncExitStack() as stack:
        relay, target, a, b = [await stack.enter_async_context(
            open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock())) for _ in range(4)]
        for host in (target, a, b):
            await host.connect(relay.listen_addrs[0])
        assert relay.relay is not None and target.relay is not None
        assert a.relay is not None and b.relay is not None
        relay.relay.set_serving(True)
        assert await target.relay.reserve(relay.peer_id, 10)
        [address] = target.relay.relayed_addrs()
        assert await a.relay.dial_circuit(address, 10) == target.peer_id  # held open
        with pytest.raises(DialError):
            await b.relay.dial_circuit(address, 10)
        assert relay.relay.stats.share_refused["circuit"] == 1
