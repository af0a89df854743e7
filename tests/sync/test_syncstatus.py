"""The sync status core (``sync.syncstatus``): from what Recon rounds found and what the node
stored to "behind ~N events, catching up at R/s", on a fixed clock."""

from __future__ import annotations

import pytest

from sync.syncstatus import BEHIND, IN_SYNC, UNKNOWN, SyncEstimator


def test_unknown_until_a_connected_peer_was_reconciled_with() -> None:
    core = SyncEstimator(started=0.0)
    assert core.view(1.0, set()).state == UNKNOWN
    assert core.view(1.0, set()).describe() == "unknown (no peer connected)"
    view = core.view(1.0, {"a"})
    assert view.state == UNKNOWN and "no Recon round" in view.reason
    core.reconciled("a", 0, 2.0)
    assert core.view(2.0, {"a"}).state == IN_SYNC
    assert core.view(2.0, {"a"}).describe() == "in sync"
    # A peer no longer connected does not count either way.
    assert core.view(3.0, {"b"}).state == UNKNOWN


def test_behind_counts_down_as_events_are_stored_then_the_next_round_measures_again() -> None:
    core = SyncEstimator(started=0.0)
    core.reconciled("a", 3000, 10.0)
    view = core.view(10.0, {"a"})
    assert (view.state, view.behind) == (BEHIND, 3000)
    assert view.peers["a"].measured == 3000 and view.peers["a"].at == 10.0
    core.stored(1000, 10.5)
    core.stored(1000, 11.5)
    view = core.view(12.0, {"a"})
    assert view.behind == 1000
    # 2,000 events in the last 10 s (the node has run 12 s): 200/s, 5 s left.
    assert view.rate_per_s == pytest.approx(200.0)
    assert view.eta_s == pytest.approx(5.0)
    assert view.describe() == "behind ~1000 events, catching up at 200/s"
    core.stored(1500, 12.5)  # more than the estimate (events the peer did not have): 0
    assert core.view(13.0, {"a"}).state == IN_SYNC
    core.reconciled("a", 40, 14.0)  # the next round finds what is really left
    assert core.view(14.0, {"a"}).behind == 40


def test_the_total_is_the_largest_peer_estimate_and_each_peer_is_listed() -> None:
    core = SyncEstimator(started=0.0)
    core.reconciled("a", 500, 1.0)
    core.reconciled("b", 0, 1.0)
    core.reconciled("c", 200, 1.0)
    view = core.view(2.0, {"a", "b", "c", "d"})
    assert view.behind == 500
    assert {p: s.behind for p, s in view.peers.items()} == {"a": 500, "b": 0, "c": 200}
    assert "d" not in view.peers  # connected, not reconciled with: unknown
    core.stored(300, 2.5)
    view = core.view(3.0, {"a", "b", "c"})
    assert (view.behind, view.peers["c"].behind) == (200, 0)
    # Once the peer ahead is gone, the rest are in sync.
    assert core.view(3.0, {"b", "c"}).state == IN_SYNC


def test_a_partial_round_can_raise_the_estimate_never_lower_it() -> None:
    core = SyncEstimator(started=0.0)
    core.reconciled("a", 100_000, 1.0)
    core.reconciled("a", 0, 2.0, partial=True)  # a backlog range with nothing missing
    assert core.view(2.0, {"a"}).behind == 100_000
    core.reconciled("a", 150_000, 3.0, partial=True)
    assert core.view(3.0, {"a"}).behind == 150_000
    assert core.view(3.0, {"a"}).peers["a"].partial
    core.reconciled("a", 0, 4.0)  # a full round
    assert core.view(4.0, {"a"}).state == IN_SYNC


def test_the_rate_covers_the_window_only() -> None:
    core = SyncEstimator(started=0.0, rate_window_s=10.0)
    assert core.rate(0.0) is None
    core.stored(5000, 100.2)
    assert core.rate(100.5) == pytest.approx(500.0)
    assert core.rate(109.5) == pytest.approx(500.0)
    assert core.rate(111.5) == 0.0  # the burst left the window
    core.stored(0, 112.0)  # nothing new is not a sample
    assert core.rate(112.0) == 0.0
    # Behind but storing nothing: no rate to show, no time left to guess.
    core.reconciled("a", 10, 112.0)
    view = core.view(112.0, {"a"})
    assert view.eta_s is None and view.describe() == "behind ~10 events"


def test_memory_is_bounded_by_max_peers() -> None:
    core = SyncEstimator(started=0.0, max_peers=3)
    for i in range(10):
        core.reconciled(f"p{i}", i, float(i))
    assert set(core.view(10.0, {f"p{i}" for i in range(10)}).peers) == {"p7", "p8", "p9"}
    with pytest.raises(ValueError):
        SyncEstimator(started=0.0, rate_window_s=0.5)
