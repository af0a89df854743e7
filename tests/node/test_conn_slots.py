"""Finding 3 of issue 27: inbound connection slots come back, whatever closed the connection.

py-libp2p 0.8.1 held each accepted connection's slot (250 in all) until the process stopped;
``node.p2p.patches.patch_inbound_slots`` ends the hold when the connection closes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.p2p import P2PConfig
from node.p2p.patches import SUPPORTED_LIBP2P_VERSION, check_libp2p_version
from node.p2p.run import open_host
from tests.node.cluster import wait_for
from tests.node.hostile_conns import churn, hold_idle
from tests.node.procs import NodeProcess

pytestmark = pytest.mark.timeout(240)


def test_the_patch_is_for_the_pinned_libp2p() -> None:
    check_libp2p_version()  # raises on any other installed version
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'"libp2p=={SUPPORTED_LIBP2P_VERSION}"' in pyproject


@pytest.mark.trio
async def test_every_closed_inbound_connection_gives_its_slot_back() -> None:
    config = P2PConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",))
    async with open_host(Ed25519PrivateKey.generate(), config) as host:
        swarm = host._host.get_network()
        limiter = swarm._inbound_limiter  # type: ignore[attr-defined]
        upgraded = await churn(host.listen_addrs[0], 60)
        assert upgraded >= 30  # libp2p's own per-peer rate limit refuses some of them
        with trio.move_on_after(30):
            while limiter.borrowed_tokens or swarm.get_connections():
                await trio.sleep(0.05)
        assert swarm.get_connections() == []
        assert limiter.borrowed_tokens == 0, f"{limiter.borrowed_tokens} slots never returned"


async def _connect_then_drop(target: str, identities: int) -> int:
    async with hold_idle(target, identities) as alive:
        return sum(alive)


def _connected(node: NodeProcess) -> set[str]:
    return {p["peer_id"] for p in node.get("/v1/peers")["connected"]}


def _honest_join(honest: NodeProcess, node: NodeProcess) -> None:
    honest.cli("peers", "forget", node.peer_id)
    wait_for(lambda: node.peer_id not in _connected(honest), 30, "forget did not disconnect")
    joined = honest.cli("join", node.listen_addrs[0])
    assert joined.returncode == 0, (joined.stderr, node.log_tail())
    wait_for(lambda: honest.peer_id in _connected(node), 30, "the honest peer is not connected")


@pytest.mark.slow
def test_honest_joins_work_after_churn_and_after_dropped_identities(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "target").start()
    honest = NodeProcess(tmp_path / "honest").start()
    try:
        started = time.monotonic()
        # 260 identities connect, hold their connections, then vanish at once: on b4adb7a
        # the slots they took (all 250) were never given back and every later peer was refused.
        held = trio.run(_connect_then_drop, node.listen_addrs[0], 260)
        assert held >= 240, held
        _honest_join(honest, node)
        dropped = time.monotonic() - started
        # 1,000 connect/disconnect cycles from one identity (libp2p's per-peer rate limit,
        # 10/s after a burst of 50, refuses most of them after the Noise handshake).
        upgraded = trio.run(churn, node.listen_addrs[0], 1000)
        assert upgraded >= 100, upgraded
        _honest_join(honest, node)
        print(f"260 identities {dropped:.1f} s; 1000 cycles ({upgraded} upgraded) "
              f"{time.monotonic() - started - dropped:.1f} s")
    finally:
        node.kill()
        honest.kill()
