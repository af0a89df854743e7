"""A node restarted well after a burst does not resend the burst as it comes back (issue 37,
catch-up after a restart), with real node processes on the default settings.

SDS resends a message of ours that no acknowledgement reached ``sds.resend_interval`` (10 s)
after sending it, and the saved channel state keeps each resend's deadline. A node stopped
right after a burst and started again more than 10 s later found every deadline passed and
resent the whole burst at once: 5,000 events, 8.7 MB of gossip, on the emulated internet,
while its peers were reconciling with it, so the events they lacked reached them behind that
flood. Such messages are now left to the restart's Recon sessions (``sync.sds.persist``).

Here b publishes a burst, stops (SIGTERM) at once and stays down past every resend deadline,
then starts again: it must resend none of it, neither at once (d3b34de resent the
whole burst in its first second back) nor one interval later.
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
#: How long b is watched after its restart: past one resend interval.
WATCH_S = RESEND_INTERVAL_S + 3


def test_a_restart_after_the_resend_deadlines_does_not_resend_the_burst(tmp_path: Path) -> None:
    nodes: list[NodeProcess] = []
    try:
        a, b, c = start_three(tmp_path, nodes)
        answer = b.post("/v1/channels/general/events",
                        {"events": [{"content": f"burst {i}"} for i in range(BURST)]})
        assert len(answer["events"]) == BURST
        b.terminate()
        # Every resend deadline of the burst passes while b is down, even one that a slow stop
        # let b reach and back off from (to at most 3 intervals after that resend).
        time.sleep(3 * RESEND_INTERVAL_S + 1)
        b.start()
        restarted = time.monotonic()
        while time.monotonic() - restarted < WATCH_S:
            assert metric(b, "sds_resends_total") == 0, "b resent its burst as it came back"
            time.sleep(0.2)
        # What a and c lacked of it (what gossip had not brought before the stop) came by Recon.
        wait_for(lambda: all(events_held(n) == BURST for n in (a, c)), 120,
                 "a and c did not take in b's burst")
    finally:
        for node in nodes:
            node.kill()
