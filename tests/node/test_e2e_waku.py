"""End-to-end: a channel in the "waku" SDS profile between real nodes (gossip and Recon)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from storage import make_engine, read_channel_ordered
from sync.sds import decode_transmission
from tests.harness.cluster import channel_log, cluster, metric, publish_many, start_inproc, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
ENV = {"SYNCNODE_P2P_CHANNELS": "alpha,wk", "SYNCNODE_SDS_CHANNEL_PROFILES": "wk=waku"}


def _stored_wires(data_dir: Path, channel: str) -> list[bytes]:
    engine = make_engine(f"sqlite:///{(data_dir / 'syncnode.db').resolve()}")
    try:
        with engine.connect() as conn:
            return [e.wire for e in read_channel_ordered(conn, channel, None, 10_000)]
    finally:
        engine.dispose()


def test_waku_channel_replicates_unsigned_by_gossip_and_recon(tmp_path: Path) -> None:
    with cluster(tmp_path, 2, env=ENV, in_process=True) as nodes:
        ids = publish_many(nodes[0], "wk", [f"w{k}" for k in range(60)])
        assert ids[0] == hashlib.sha256(b"w0").hexdigest()  # the package's id rule
        publish_many(nodes[0], "alpha", [f"s{k}" for k in range(10)])
        wait_for(lambda: channel_log(nodes[1], "wk") == channel_log(nodes[0], "wk")
                 and len(channel_log(nodes[1], "alpha")) == 10, 60, "gossip did not deliver")
        # Unsigned messages were taken on the waku channel only, and counted.
        assert metric(nodes[1], "sds_unsigned_accepted_total") >= 60
        # The same payload again is the same waku message: refused, not duplicated.
        with nodes[0].client() as client:
            r = client.post("/v1/channels/wk/events", json={"content": "w0"})
        assert r.status_code == 409, r.text
        late = start_inproc(tmp_path, "late", bootstrap=nodes[:1],
                                env={**ENV, "SYNCNODE_P2P_TEST_DROP_INCOMING_GOSSIP": "1.0"})
        try:
            wait_for(lambda: channel_log(late, "wk") == channel_log(nodes[0], "wk")
                     and len(channel_log(late, "alpha")) == 10, 60,
                     "late joiner did not catch up")
            assert metric(late, "recon_events_fetched_total") >= 70
            for node in (nodes[0], late):
                for wire in _stored_wires(node.data_dir, "wk"):
                    event = decode_transmission(wire, check_id=False,
                                                verify_signature=False).event
                    assert event.signature is None
                    assert event.message_id == hashlib.sha256(event.content).hexdigest()
                for wire in _stored_wires(node.data_dir, "alpha"):
                    assert decode_transmission(wire).event.signature is not None
        finally:
            late.kill()
