"""Catch-up after a restart, with real node processes on the default settings (issue 37,
finding 2): b is killed with SIGKILL in the middle of a publish burst and restarted (c, which
holds b's first events, was stopped for the burst and comes back after b); its peers a and c
then take in every event b holds, in one pass: no event Recon fetched waits in SDS's
dependency buffer (``sds_fetched_waiting_total``) and none is fetched twice
(``recon_events_fetched_total`` is ``recon_events_stored_total``, the fetched events that were
new to the database), and b resends none of the events it held unacknowledged at the kill.

Before the fix each Recon session fetched thousands of b's events out of causal order, SDS's
bounded buffer evicted most of them and the next session (``recon.interval_s`` later) fetched
them again: minutes for a few thousand events (``sync.transfer.causal``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness.burst import events_held, killed_mid_burst
from tests.harness.catchup_timing import fetch_sessions
from tests.harness.cluster import metric, wait_for

pytestmark = [pytest.mark.slow]

BURST = 5_000
KILL_AFTER = 3_000  # stored on b when it is killed: more than SDS buffers per sender (1,000)
#: c holds b's first events and was stopped for the burst: what it lacks is certain to sit
#: above a held part of b's stream (how much gossip brought a before the kill varies).
BEFORE = 200
EVICTED = 'sds_evicted_total{buffer="waiting"}'
WAITING = "sds_fetched_waiting_total"


def test_peers_of_a_node_killed_mid_burst_take_in_its_events_once(tmp_path: Path) -> None:
    with killed_mid_burst(tmp_path, BURST, KILL_AFTER, away_after=BEFORE) as ([a, b, c], stored):
        assert stored >= KILL_AFTER
        started = time.monotonic()
        # Generous: one Recon round (10 s by default) and the gossip grace, then the fetch.
        wait_for(lambda: all(events_held(n) == stored for n in (a, c)), 180,
                 f"a and c did not take in b's {stored} events")
        took = time.monotonic() - started
        # After its restart b resends none of what its saved state held unacknowledged (when
        # a save caught the burst, thousands): the restart's Recon sessions carry it
        # (restore(..., resend_restored=False)). Resent, those went out at once and five times
        # over while c was still fetching them (a loaded run: 2,200), and copies that came
        # before their fetched twins waited in SDS's buffer and were evicted.
        resent = metric(b, "sds_resends_total")
        assert resent == 0, b.log_tail()
        for peer in (a, c):
            fetched = metric(peer, "recon_events_fetched_total")
            new = metric(peer, "recon_events_stored_total")
            # The loop fetched most of b's events again (a few for the other paths).
            assert fetched - new <= max(5, new // 100), \
                f"{fetched} fetched for {new} stored: fetched twice"
            # Recon's fetches come in causal order and never wait; only an event fetched by id
            # (a dependency a gossip copy named, whose own dependencies may still be on their
            # way) can.
            assert metric(peer, WAITING) <= metric(peer, "fetch_received_total"), \
                peer.log_tail()
            # Nothing is evicted from the dependency buffer: no gossip copy of b's comes
            # before its fetched twin.
            assert metric(peer, EVICTED) == 0, peer.log_tail()
        # a ran throughout: each session that fetched logged its span (the benchmarks time a
        # catch-up by them), and together they name every event it fetched.
        logged = sum(s.events for s in fetch_sessions(a.stderr_path))
        assert logged == metric(a, "recon_events_fetched_total") > 0, a.log_tail()
        print(f"a and c held b's {stored} events {took:.1f} s after its restart")
