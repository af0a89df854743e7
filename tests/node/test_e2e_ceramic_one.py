"""End-to-end: nodes configured with ceramic-one eventIds (no event height) sync through Recon."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import keys_in_range, make_engine
from sync.recon.eventid import CERAMIC_ONE, network_bounds, parse_event_id
from tests.harness.cluster import channel_log, cluster, metric, publish_many, start_inproc, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
ENV = {"SYNCNODE_P2P_CHANNELS": "alpha", "SYNCNODE_RECON_EVENT_ID_LAYOUT": CERAMIC_ONE}


def _stored_keys(data_dir: Path) -> list[bytes]:
    engine = make_engine(f"sqlite:///{(data_dir / 'syncnode.db').resolve()}")
    try:
        with engine.connect() as conn:
            lo, hi = network_bounds(1)
            return keys_in_range(conn, lo, hi, 10_000)
    finally:
        engine.dispose()


def test_late_joiner_catches_up_with_ceramic_one_keys(tmp_path: Path) -> None:
    with cluster(tmp_path, 1, env=ENV, in_process=True) as (first,):
        publish_many(first, "alpha", [f"c{k}" for k in range(300)])
        wait_for(lambda: len(channel_log(first, "alpha")) == 300, 30, "publishing stalled")
        # No gossip at all for the late node: everything it has, Recon (or the fetch of ids
        # SDS reported missing) pulled, keyed without heights.
        late = start_inproc(tmp_path, "late", bootstrap=[first],
                                env={**ENV, "SYNCNODE_P2P_TEST_DROP_INCOMING_GOSSIP": "1.0"})
        try:
            wait_for(lambda: channel_log(late, "alpha") == channel_log(first, "alpha"), 60,
                     "late joiner did not catch up")
            assert metric(late, "recon_events_fetched_total") > 0
            assert metric(late, "p2p_gossip_received") == 0
            for node in (first, late):
                keys = _stored_keys(node.data_dir)
                assert len(keys) == 300
                parsed = [parse_event_id(k, CERAMIC_ONE) for k in keys]
                assert all(p.height is None and p.codec == 0x55 for p in parsed)
        finally:
            late.kill()
