"""End-to-end: real nodes on 127.0.0.1 (in this process: tests.harness.inproc) replicating over
SDS, GossipSub and Recon."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cluster import channel_log, cluster, metric, publish_many, start_inproc, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
CHANNELS = {"SYNCNODE_P2P_CHANNELS": "alpha,beta"}


def identical_logs(nodes: list, channels: tuple[str, ...], expected: int) -> bool:  # type: ignore[type-arg]
    for channel in channels:
        logs = [channel_log(n, channel) for n in nodes]
        if len(logs[0]) != expected or any(log != logs[0] for log in logs[1:]):
            return False
    return True


def test_three_nodes_converge_on_identical_logs(tmp_path: Path) -> None:
    with cluster(tmp_path, 3, env=CHANNELS, in_process=True) as nodes:
        for i, node in enumerate(nodes):
            publish_many(node, "alpha", [f"a-{i}-{k}" for k in range(100)])
            publish_many(node, "beta", [f"b-{i}-{k}" for k in range(100)])
        wait_for(lambda: identical_logs(nodes, ("alpha", "beta"), 300), 60,
                 "logs did not converge")
        log = channel_log(nodes[0], "alpha")
        assert log == sorted(log)  # (lamport, message id) order
        # Published in a burst, so gossip batching (p2p.gossip_linger_ms) put several SDS
        # messages into each gossip message.
        gossiped = [metric(n, "p2p_gossip_published_total") for n in nodes]
        assert all(0 < g < 100 for g in gossiped), gossiped
        assert {c for _, _, c in log} == {f"a-{i}-{k}" for i in range(3) for k in range(100)}


def test_late_joiner_catches_up_through_recon(tmp_path: Path) -> None:
    with cluster(tmp_path, 2, env=CHANNELS, in_process=True) as nodes:
        publish_many(nodes[0], "alpha", [f"x{k}" for k in range(1000)])
        publish_many(nodes[1], "beta", [f"y{k}" for k in range(1000)])
        wait_for(lambda: identical_logs(nodes, ("alpha",), 1000), 60, "first two did not sync")
        # The late node hears no gossip at all: whatever it gets, it pulled.
        late = start_inproc(tmp_path, "late", bootstrap=nodes[:1],
                                env={**CHANNELS, "SYNCNODE_P2P_TEST_DROP_INCOMING_GOSSIP": "1.0"})
        try:
            wait_for(lambda: identical_logs([*nodes, late], ("alpha", "beta"), 1000), 60,
                     "late joiner did not catch up")
            # Pulled by Recon, and by the fetch of ids SDS reported missing meanwhile.
            recon = metric(late, "recon_events_fetched_total")
            by_id = metric(late, "fetch_received_total")
            assert recon + by_id >= 2000
            # Never the same event twice through Recon (sessions in both directions overlap).
            assert 1000 <= recon <= 2000
            assert metric(late, "p2p_gossip_received_total") == 0
        finally:
            late.kill()
