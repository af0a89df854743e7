"""A node restarted well after a burst does not resend the burst as it comes back (issue 37,
catch-up after a restart), with real nodes on the default settings.

SDS resends a message of ours that no acknowledgement reached ``sds.resend_interval`` (10 s)
after sending it, and the saved channel state keeps each resend's deadline. A node stopped
right after a burst and started again more than 10 s later found every deadline passed and
resent the whole burst at once: 5,000 events, 8.7 MB of gossip, on the emulated internet,
while its peers were reconciling with it, so the events they lacked reached them behind that
flood. Such messages are now left to the restart's Recon sessions (``sync.sds.persist``).

Here b publishes a burst, stops (a clean shutdown, as ``syncnode run`` after SIGTERM) at once
and comes back past every resend deadline, then must resend none of it, neither at once
(d3b34de resent the whole burst in its first second back) nor one interval later. The nodes
run in this process: the rule is about the saved state, not the process (SIGTERM's own stop
is tested by tests/node/test_e2e_restart_gossip.py). b is not kept down for the 31 s: it
starts again on a wall clock that far ahead (``AheadClock``), the clock its saved deadlines
are compared with, so it finds them as long past as after that wait; the watch after the
restart is real time, one default resend interval and more.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.burst import events_held
from tests.harness.clocks import AheadClock
from tests.harness.cluster import holds_for, join_all, metric, wait_for
from tests.harness.inproc import InProcessNode
from tests.harness.procs import start_all

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BURST = 1_000
RESEND_INTERVAL_S = 10.0  # sds.resend_interval's default
#: How long b is watched after its restart: past one resend interval.
WATCH_S = RESEND_INTERVAL_S + 3


def test_a_restart_after_the_resend_deadlines_does_not_resend_the_burst(tmp_path: Path) -> None:
    # On the default settings (no fast timers), each joined to the others.
    nodes = start_all([InProcessNode(tmp_path / name) for name in "abc"])
    try:
        a, b, c = nodes
        assert b.node_config().sds.resend_interval_s == RESEND_INTERVAL_S
        join_all(nodes)  # ``syncnode join``'s API call
        wait_for(lambda: all(len(n.get("/v1/peers")["connected"]) >= 2 for n in nodes), 60,
                 "the three nodes did not connect")
        answer = b.post("/v1/channels/general/events",
                        {"events": [{"content": f"burst {i}"} for i in range(BURST)]})
        assert len(answer["events"]) == BURST
        b.terminate()
        # Every resend deadline of the burst has passed when b is back, even one that a slow
        # stop let b reach and back off from (to at most 3 intervals after that resend).
        b.clock = AheadClock(3 * RESEND_INTERVAL_S + 1)
        b.extra_args = ["--bootstrap", a.listen_addrs[0], "--bootstrap", c.listen_addrs[0]]
        b.start()
        holds_for(lambda: metric(b, "sds_resends_total") == 0, WATCH_S,
                  "b resent its burst as it came back")
        # What a and c lacked of it (what gossip had not brought before the stop) came by Recon.
        wait_for(lambda: all(events_held(n) == BURST for n in (a, c)), 120,
                 "a and c did not take in b's burst")
    finally:
        for node in nodes:
            node.kill()
