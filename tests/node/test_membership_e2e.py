"""Finding 1 of issue 27: joining one member reaches the whole group, and losing that member
does not partition the rest (scenario 1, real node processes on loopback)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.node.cluster import channel_log, publish_many, start_node, wait_for
from tests.node.procs import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _connected(node: NodeProcess) -> set[str]:
    return {p["peer_id"] for p in node.get("/v1/peers")["connected"]}


def test_four_nodes_joined_to_the_first_mesh_and_survive_its_loss(tmp_path: Path) -> None:
    nodes = [start_node(tmp_path, "n1")]
    try:
        for name in ("n2", "n3", "n4"):
            node = start_node(tmp_path, name)
            nodes.append(node)
            joined = node.cli("join", nodes[0].listen_addrs[0])
            assert joined.returncode == 0, joined.stderr
        started = time.monotonic()
        wait_for(lambda: all(_connected(n) >= {m.peer_id for m in nodes if m is not n}
                             for n in nodes), 30, "the four nodes did not all connect")
        meshed_s = time.monotonic() - started
        # Each knows the others through peer exchange, not only through n1.
        for node in nodes[1:]:
            listing = json.loads(node.cli("peers", "--json").stdout)
            assert listing["address_book"] >= 3, listing
        nodes[0].kill()
        event = publish_many(nodes[1], "general", ["after n1 left"])[0]
        wait_for(lambda: all(event in {m for _, m, _ in channel_log(n, "general")}
                             for n in nodes[2:]), 60, "n3 and n4 did not get n2's event")
        print(f"meshed in {meshed_s:.1f} s")
    finally:
        for node in nodes:
            node.kill()
