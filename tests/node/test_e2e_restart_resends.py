"""A node restarted well after a burst does not resend the whole burst as it comes back (issue
37, catch-up after a restart), with real node processes on the default settings.

SDS resends a message of ours that no acknowledgement reached ``sds.resend_interval`` (10 s)
after sending it, and the saved channel state keeps each resend's deadline. A node stopped
right after a burst and started again more than 10 s later found every deadline passed and
resent the whole burst at once: 5,000 events, 8.7 MB of gossip, on the emulated internet,
while its peers were reconciling with it, so the events they lacked reached them behind that
flood. A deadline that passed while the node was down now falls one ``resend_interval`` after
the restart (``sync.sds.persist``); the restart's Recon sessions carry what each peer lacks.

Here b publishes a burst that a and c take in, stops (SIGTERM) and stays down past the resend
interval, then starts again: it must resend nothing in its first seconds back (on d3b34de it
resent the whole burst at once).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness.burst import events_held, start_three
from tests.harness.cluster import metric, wait_for
from tests.harness.procs import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BURST = 1_000
RESEND_INTERVAL_S = 10.0  # sds.resend_interval's default
#: How long b is watched after its restart: well inside the resend interval, so a resend
#: seen here can only be one that fell due while b was down.
WATCH_S = 5.0


def test_a_restart_after_the_resend_deadlines_does_not_resend_the_burst(tmp_path: Path) -> None:
    nodes: list[NodeProcess] = []
    try:
        a, b, c = start_three(tmp_path, nodes)
        answer = b.post("/v1/channels/general/events",
                        {"events": [{"content": f"burst {i}"} for i in range(BURST)]})
        assert len(answer["events"]) == BURST
        wait_for(lambda: all(events_held(n) == BURST for n in (a, c)), 120,
                 "a and c did not take in b's burst")
        b.terminate()
        time.sleep(RESEND_INTERVAL_S + 1)  # every resend deadline of the burst passes
        b.start()
        restarted = time.monotonic()
        # b's channel was restored before its API answered: the whole watch falls inside the
        # resend interval that follows the restore.
        while time.monotonic() - restarted < WATCH_S:
            assert metric(b, "sds_resends_total") == 0, "b resent its burst as it came back"
            time.sleep(0.2)
    finally:
        for node in nodes:
            node.kill()
