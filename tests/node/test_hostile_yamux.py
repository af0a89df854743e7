"""A peer ignoring Yamux flow control, against a real node process (compat entry Y4).

A hostile libp2p host waits for the gossip stream the node opens to it (the node only writes
on it) and writes 64 MiB on it as 64 KiB frames, ignoring the 256 KiB receive window the node
granted. On 3fa3c6b the node buffered every byte (py-libp2p 0.8.1 appends a frame beyond the
window with a warning) and stayed connected: its resident memory grew by the flood. Now the
first frame past the window ends the connection unread (GO_AWAY, protocol error), the overrun
is counted and the peer charged, the node's memory stays where it was, and it keeps serving:
its API publishes, and it takes in an honest peer's gossip.

Figures (RSS, bytes written before the cut) are printed; the memory bound is generous (a
quarter of the flood) and independent of timing.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.identity import peer_id_of
from sync.sds import encode_event
from tests.harness.cluster import metric, publish_many, start_node, wait_for
from tests.harness.hostile import gossip, peak_rss_mib, stored_ids, window_flood

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FLOOD = 64 << 20
PENALTY = 'syncnode_peer_penalties_total{reason="protocol"}'


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


def test_a_peer_writing_far_past_the_window_is_cut_off_and_the_node_keeps_serving(
        tmp_path: Path) -> None:
    victim = start_node(tmp_path, "victim")
    try:
        assert victim.proc is not None
        pid = victim.proc.pid
        assert metric(victim, "p2p_yamux_window_overruns_total") == 0  # exported from start
        publish_many(victim, "general", [f"seed-{i}" for i in range(20)])
        before, peak_before = _rss_mib(pid), peak_rss_mib(pid)
        target = victim.listen_addrs[0]
        attacker, written = trio.run(window_flood, target, FLOOD)
        after, peak_after = _rss_mib(pid), peak_rss_mib(pid)
        print(f"attacker wrote {written / 2**20:.1f} MiB of {FLOOD >> 20} MiB before the cut; "
              f"node RSS {before:.0f} -> {after:.0f} MiB, peak {peak_before:.0f} -> "
              f"{peak_after:.0f} MiB")
        assert peak_after - peak_before < (FLOOD >> 20) / 4, "the node held the flood"
        assert written < FLOOD, "the node never cut the connection"
        wait_for(lambda: metric(victim, "p2p_yamux_window_overruns_total") == 1, 30,
                 "the overrun was not counted")
        wait_for(lambda: PENALTY in victim.get("/metrics"), 30, "the attacker was not charged")
        assert attacker not in {p["peer_id"] for p in victim.get("/v1/peers")["connected"]}
        # The node keeps serving: its API, and an honest peer over gossip.
        assert publish_many(victim, "general", ["after the flood"])
        key = Ed25519PrivateKey.generate()
        event = encode_event("general", peer_id_of(key), int(time.time() * 1000), (),
                             b"an honest peer, after the flood", key)
        trio.run(partial(gossip, target, "general", [event.wire], key=key,
                         arrived=lambda: event.message_id in stored_ids(victim)))
        assert metric(victim, "p2p_yamux_window_overruns_total") == 1
    finally:
        victim.kill()
