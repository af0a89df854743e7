"""A fresh node catching up on an old log through Recon: its ingest workers write what they
verified (recon.ingest_workers_write), sessions after the first reconcile the ranges it left,
and the log it ends with is the source's, each event fetched once (real nodes in the test process,
SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.bench.catchup_log import build_log
from tests.harness.cluster import channel_log, metric, start_inproc, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
EVENTS = 800


def test_a_fresh_node_stores_an_old_log_through_its_ingest_workers(tmp_path: Path) -> None:
    assert build_log(tmp_path / "source", EVENTS) == EVENTS
    source = start_inproc(tmp_path, "source")
    try:
        # At most 200 missing keys a session: the catch-up takes several, the later ones
        # over the ranges the first one left (RangeBacklog).
        fresh = start_inproc(tmp_path, "fresh", bootstrap=[source],
                                 env={"SYNCNODE_RECON_MAX_MISSING_KEYS": "200"})
        try:
            wanted = {mid for _, mid, _ in channel_log(source, "general")}
            assert len(wanted) == EVENTS
            wait_for(lambda: {mid for _, mid, _ in channel_log(fresh, "general")} == wanted, 90,
                     "the fresh node did not store the source's log")
            assert metric(fresh, "store_remote_appends_total") >= 1
            assert metric(fresh, "store_remote_settled_total") == 0
            assert metric(fresh, "events_store_failed_total") == 0
            # Each event fetched once and stored once (fetched vs stored).
            wait_for(lambda: metric(fresh, "recon_events_stored_total") == EVENTS, 10,
                     "stored events not counted")
            assert metric(fresh, "recon_events_fetched_total") == EVENTS
            assert metric(fresh, "recon_backlog_ranges_taken_total") >= 3
        finally:
            fresh.kill()
    finally:
        source.kill()
