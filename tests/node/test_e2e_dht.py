"""Peers found through the Kademlia DHT with the CIP-124 rendezvous keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig
from node.p2p.run import open_host
from node.replication.discovery import channel_rendezvous, network_rendezvous
from tests.harness.cluster import (
    channel_log,
    metric,
    publish_many,
    start_inproc,
    until,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
DHT = {"SYNCNODE_P2P_DHT": "true", "SYNCNODE_P2P_DHT_INTERVAL_S": "2"}
KAD_PROTOCOL = "/ipfs/kad/1.0.0"  # py-libp2p's Kademlia protocol id


def test_rendezvous_keys_follow_cip_124() -> None:
    assert network_rendezvous(0) == "ce010500"
    assert network_rendezvous(0xFF) == "ce0105ff01"
    key = bytes.fromhex(channel_rendezvous(1, "general"))
    assert key[:4] == bytes.fromhex("ce017101") and len(key) == 4 + 16


def test_two_nodes_that_only_know_a_third_find_each_other(tmp_path: Path) -> None:
    hub = start_inproc(tmp_path, "hub", env=DHT)
    left = start_inproc(tmp_path, "left", env=DHT, bootstrap=[hub])
    right = start_inproc(tmp_path, "right", env=DHT, bootstrap=[hub])
    try:
        def linked() -> bool:
            peers = {p["peer_id"] for p in left.get("/v1/peers")["connected"]}
            return right.peer_id in peers

        wait_for(linked, 90, "left and right did not discover each other")
        # Neither was told of the other: each finds the other at the CIP-124 rendezvous.
        wait_for(lambda: metric(left, "dht_peers_found_total") >= 1
                 and metric(right, "dht_peers_found_total") >= 1, 60,
                 "no peer found at the rendezvous keys")
        assert right.peer_id in [p["peer_id"] for p in left.get("/v1/peers")["connected"]]
        assert right.peer_id in left.get("/v1/peers")["known"]
        publish_many(left, "general", ["found you"])
        wait_for(lambda: len(channel_log(right, "general")) == 1, 30, "event did not arrive")
    finally:
        for node in (hub, left, right):
            node.kill()


def test_a_dht_peer_that_never_answers_fails_the_round_and_is_counted(tmp_path: Path) -> None:
    """A peer that takes DHT queries and never answers: each round times out after
    p2p.dht_timeout_s and is counted, and the node keeps serving."""
    node = start_inproc(tmp_path, "n", env={**DHT, "SYNCNODE_P2P_DHT_INTERVAL_S": "1",
                                                "SYNCNODE_P2P_DHT_TIMEOUT_S": "1"})

    async def stall_dht() -> None:
        key = Ed25519PrivateKey.generate()
        async with open_host(key, P2PConfig(), clock=SystemClock()) as host:

            async def never_answer(_stream: FramedStream) -> None:
                await trio.sleep_forever()  # until the host stops
            host.set_stream_handler(KAD_PROTOCOL, never_answer)
            await host.connect(node.listen_addrs[0])
            await until(lambda: trio.to_thread.run_sync(metric, node, "dht_errors_total"), 30,
                        "no DHT error counted")

    try:
        assert metric(node, "dht_errors_total") == 0
        trio.run(stall_dht)
        assert metric(node, "dht_errors_total") >= 1
        assert node.get("/v1/status")["peer_id"] == node.peer_id
    finally:
        node.kill()
