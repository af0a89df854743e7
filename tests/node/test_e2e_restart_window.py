"""A node keeps only the newest delivered ids of a channel in memory (``sds.delivered_window``)
and reads only that much of its log back at start-up; old events that come again, before or
after a restart, are recognised through the database and never delivered twice."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.harness.cluster import channel_log, cluster, metric, wait_for
from tests.harness.inproc import InProcessNode
from tests.node.test_hostile_events import gossip, signed_event

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
WINDOW = 1000
EVENTS = 1300


def _restart(node: InProcessNode, peer: InProcessNode) -> None:
    node.terminate()
    node.extra_args = ["--bootstrap", peer.listen_addrs[0]]
    node.start()
    wait_for(lambda: len(node.get("/v1/peers")["connected"]) >= 1, 30, "no reconnect")


def _in_memory(node: InProcessNode) -> int:
    (general,) = [c for c in node.get("/v1/channels")["channels"] if c["channel"] == "general"]
    assert general["delivered"] >= general["delivered_in_memory"]
    return int(general["delivered_in_memory"])


async def _send(node: InProcessNode, wires: list[bytes], held: int, what: str) -> None:
    """Gossip ``wires`` to ``node`` from a crafted host that stays until the node's log holds
    ``held`` events (not a fixed linger: the queued messages must leave before it closes)."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(gossip, linger=120, pace=0.002),
                           node.listen_addrs[0], "general", wires)
        await trio.to_thread.run_sync(
            wait_for, lambda: len(channel_log(node, "general")) == held, 60, what)
        nursery.cancel_scope.cancel()


def test_restart_reads_the_newest_window_and_recognises_old_events(tmp_path: Path) -> None:
    # Nodes in this process (a restart here is a clean shutdown and a new start from the same
    # data dir, as ``syncnode run`` after SIGTERM).
    with cluster(tmp_path, 2, env={"SYNCNODE_SDS_DELIVERED_WINDOW": str(WINDOW)},
                 in_process=True) as nodes:
        other, node = nodes
        assert isinstance(node, InProcessNode) and isinstance(other, InProcessNode)
        key = Ed25519PrivateKey.generate()
        base = int(time.time() * 1000) - 200_000
        wires = [signed_event(key, base + i, f"w{i}".encode()) for i in range(EVENTS)]
        trio.run(_send, node, wires, EVENTS, "events not stored")
        assert _in_memory(node) == WINDOW

        _restart(node, other)
        assert _in_memory(node) == WINDOW  # only the newest part of the log was read back
        delivered = metric(node, "events_delivered_total")
        newest = signed_event(key, base + EVENTS, b"after restart")
        # The oldest events again (out of memory: only the database knows them), then a new one.
        trio.run(_send, node, [*wires[:200], newest], EVENTS + 1, "new event not stored")
        time.sleep(1)
        log = channel_log(node, "general")
        assert len(log) == EVENTS + 1 and len({m for _, m, _ in log}) == EVENTS + 1
        assert metric(node, "events_delivered_total") - delivered == 1
        assert metric(node, "sds_store_lookups_total") > 0
        assert [c for _, _, c in log][-1] == "after restart"
