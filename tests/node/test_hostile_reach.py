"""Issue 38, findings 1, 4 and 6: hostile libp2p hosts against reachability, the relay service,
liveness and the connection manager of real node processes (tests/node/hostile_reach.py).

On d9bdd2e two free identities on the node's own machine answering ``ok 198.18.0.99`` to the
dial-back protocol made it public (and a relay) within seconds, and one process took every
relay reservation; each test here fails there.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from tests.node.cluster import metric, wait_for
from tests.node.hostile_reach import dialback_liars, grab_reservations
from tests.node.procs import NodeProcess

pytestmark = pytest.mark.timeout(240)


async def _poll(condition, timeout: float, message: str) -> None:  # type: ignore[no-untyped-def]
    """``wait_for`` without blocking the hostile hosts' event loop."""
    await trio.to_thread.run_sync(wait_for, condition, timeout, message)


def _lies(node: NodeProcess) -> float:
    return metric(node, "dialback_lies_total")


async def _lie_to(node: NodeProcess, liars: int) -> dict[str, float]:
    async with dialback_liars(node.listen_addrs[0], liars) as answered:
        await _poll(lambda: all(answered), 60, f"not every liar was asked: {answered}")
        # The node has weighed every answer: counted as lies, or (d9bdd2e) believed.
        await _poll(lambda: _lies(node) >= liars or metric(node, "reachability_state") == 2,
                    60, "the node never weighed the answers")
        seen = {name: metric(node, name) for name in (
            "reachability_state", "relay_serving", "dialback_lies_total")}
        seen["penalties"] = metric(node, 'peer_penalties_total{reason="dialback_lie"}')
        return seen


def test_dialback_liars_do_not_make_a_node_public(tmp_path: Path) -> None:
    # Default settings: serve_relay = "auto", two confirmations.
    node = NodeProcess(tmp_path / "victim").start()
    try:
        seen = trio.run(_lie_to, node, 2)
        assert seen["reachability_state"] == 0, seen  # unknown, as before the lies
        assert seen["relay_serving"] == 0, seen
        assert seen["dialback_lies_total"] >= 2 and seen["penalties"] >= 2, seen
        assert node.status()["network"]["reachability"] == "unknown"
    finally:
        node.kill()


def test_one_source_gets_only_its_share_of_relay_reservations(tmp_path: Path) -> None:
    # Default share: 4 reservations per /24; every identity here comes from 127.0.0.1.
    node = NodeProcess(tmp_path / "relay", env={
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
