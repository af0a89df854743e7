"""Peer scoring and budgets on a fixed clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.peerscore import PeerBuckets, PeerScores, ScoreConfig, TokenBucket


def test_penalty_decays_by_half_life() -> None:
    scores = PeerScores(ScoreConfig(half_life_s=10.0))
    assert not scores.penalise("p", "protocol", now=0.0)
    assert scores.score("p", 0.0) == pytest.approx(-30.0)
    assert scores.score("p", 10.0) == pytest.approx(-15.0)
    assert scores.score("p", 20.0) == pytest.approx(-7.5)
    assert scores.score("unknown", 5.0) == 0.0


def test_ban_at_threshold_and_expiry() -> None:
    scores = PeerScores(ScoreConfig(ban_threshold=-100.0, ban_s=60.0))
    assert not scores.penalise("p", "invalid_event", now=0.0)
    assert scores.penalise("p", "invalid_event", now=0.0)  # -100: banned
    assert scores.is_banned("p", 1.0)
    assert scores.is_banned("p", 59.9)
    assert not scores.is_banned("p", 60.0)
    assert scores.banned(30.0) == ["p"]
    assert scores.bans_total == 1
    # Further penalties during the ban do not extend it or count a second ban.
    assert not scores.penalise("p", "invalid_event", now=2.0, count=5)
    assert scores.banned_until("p") == 60.0


def test_repeat_offender_ban_grows_and_caps() -> None:
    scores = PeerScores(ScoreConfig(ban_s=10.0, max_ban_s=35.0, memory_s=1000.0))
    lengths = []
    now = 0.0
    for _ in range(4):
        assert scores.penalise("p", "protocol", now, count=4)
        lengths.append(scores.banned_until("p") - now)
        now = scores.banned_until("p") + 1.0
    assert lengths == [10.0, 20.0, 35.0, 35.0]


def test_ban_count_forgotten_after_memory() -> None:
    scores = PeerScores(ScoreConfig(ban_s=10.0, memory_s=100.0))
    assert scores.penalise("p", "protocol", 0.0, count=4)
    assert scores.penalise("p", "protocol", 500.0, count=4)
    assert scores.banned_until("p") == 510.0


def test_unknown_reason_is_our_bug() -> None:
    with pytest.raises(ValueError):
        PeerScores().penalise("p", "no such reason", 0.0)


def test_table_is_bounded_and_keeps_bans() -> None:
    scores = PeerScores(ScoreConfig(max_peers=3, ban_s=1000.0))
    scores.penalise("bad", "protocol", 0.0, count=10)
    assert scores.is_banned("bad", 1.0)
    for i in range(1000):
        scores.penalise(f"fresh{i}", "busy", float(i) / 1000)
        assert len(scores) <= 3
    assert scores.is_banned("bad", 2.0)
    assert scores.pruned_total >= 997


def test_prune_forgets_neutral_entries_only() -> None:
    scores = PeerScores(ScoreConfig(half_life_s=1.0, ban_s=5.0, memory_s=100.0))
    scores.penalise("mild", "busy", 0.0)
    scores.penalise("bad", "protocol", 0.0, count=4)
    assert scores.prune(1.0) == 0  # mild is still at -1
    assert scores.prune(30.0) == 1  # mild decayed; bad's ban is still remembered
    assert "bad" in scores and "mild" not in scores
    assert scores.prune(200.0) == 1
    assert len(scores) == 0


def test_token_bucket_refills_up_to_burst() -> None:
    bucket = TokenBucket(rate=2.0, burst=4.0, now=0.0)
    assert all(bucket.take(0.0) for _ in range(4))
    assert not bucket.take(0.0)
    assert bucket.take(0.5)  # one token back
    assert not bucket.take(0.5)
    assert bucket.available(100.0) == 4.0
    assert bucket.full(100.0)
    assert not bucket.take(100.0, amount=5.0)


def test_peer_buckets_bounded() -> None:
    buckets = PeerBuckets(rate=1.0, burst=2.0, max_peers=10)
    for i in range(100):
        assert buckets.take(f"p{i}", 0.0)
        assert len(buckets) <= 10
    assert buckets.take("x", 0.0) and buckets.take("x", 0.0)
    assert not buckets.take("x", 0.0)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                          st.sampled_from(["protocol", "withheld", "busy", "flood"]),
                          st.floats(min_value=0, max_value=50)), max_size=60))
def test_score_never_positive_and_ban_implies_crossing(
        calls: list[tuple[str, str, float]]) -> None:
    scores = PeerScores(ScoreConfig(max_peers=2))
    now = 0.0
    for peer, reason, step in calls:
        now += step
        before = scores.score(peer, now)
        banned = scores.penalise(peer, reason, now)
        assert scores.score(peer, now) <= 0.0
        if banned:
            assert before - scores.config.weights[reason] <= scores.config.ban_threshold
            assert scores.is_banned(peer, now)
        assert len(scores) <= 2
