"""The snapshot job's period closing cannot be captured by one far-future event (attack 6)."""

from __future__ import annotations

from spark_jobs.snapshot import end_period

PERIOD, SETTLE = 60_000, 60_000
NOW = 1_700_000_000_000


def test_a_quiet_log_has_its_last_period_written_once_settled() -> None:
    # The newest event is five periods old and nothing came since (issue 17): its period has
    # settled by the clock and is written, rather than waiting for an event that never comes.
    newest = NOW - 5 * PERIOD
    assert end_period(newest, NOW, PERIOD, SETTLE) == (NOW - SETTLE) // PERIOD
    assert end_period(newest, NOW, PERIOD, SETTLE) > newest // PERIOD


def test_a_far_future_event_closes_nothing_beyond_the_jobs_clock() -> None:
    honest_newest = NOW - 1000
    normal = end_period(honest_newest, NOW, PERIOD, SETTLE)
    for ahead in (10 * 60_000, 365 * 86_400_000, (1 << 62) - NOW):
        assert end_period(NOW + ahead, NOW, PERIOD, SETTLE) == normal
    # Periods still open by the clock stay open: an honest event arriving now for the period
    # just before "now - settle" is not late.
    late_arrival = NOW - SETTLE + 1
    assert late_arrival // PERIOD >= end_period(NOW + 600_000, NOW, PERIOD, SETTLE)


def test_all_still_writes_every_period() -> None:
    assert end_period(NOW, NOW, PERIOD, SETTLE, include_open=True) == NOW // PERIOD + 1
