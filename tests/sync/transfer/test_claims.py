"""Claims on missing keys: they lapse, return to the pool, and are bounded."""

from __future__ import annotations

import pytest

from sync.transfer import ClaimTable

KEYS = [bytes([i]) * 8 for i in range(10)]


def test_claimed_keys_are_not_claimed_twice() -> None:
    table = ClaimTable(timeout=10.0)
    a = table.open("a", 0.0)
    b = table.open("b", 0.0)
    assert table.claim(a, KEYS[:6], 0.0) == KEYS[:6]
    assert table.claim(b, KEYS, 1.0) == KEYS[6:]
    assert all(table.is_claimed(k, 1.0) for k in KEYS)


def test_claims_lapse_without_progress_and_peer_is_reported() -> None:
    table = ClaimTable(timeout=10.0)
    withholder = table.open("bad", 0.0)
    table.claim(withholder, KEYS, 0.0)
    table.progress(withholder, 5.0)  # something arrived: another 10 s
    assert table.is_claimed(KEYS[0], 14.0)
    assert not table.is_claimed(KEYS[0], 15.0)  # lapsed, even before expire() runs
    assert table.expire(15.0) == [("bad", 10)]
    assert table.lapsed_total == 10
    assert len(table) == 0
    honest = table.open("good", 15.0)
    assert table.claim(honest, KEYS, 15.0) == KEYS
    # The lapsed session's late delivery is still welcome and costs nothing further.
    table.delivered(withholder, KEYS[0], 16.0)
    assert table.expire(16.0) == []


def test_short_answer_releases_at_once() -> None:
    table = ClaimTable(timeout=100.0)
    sid = table.open("p", 0.0)
    table.claim(sid, KEYS[:4], 0.0)
    assert table.release(sid, KEYS[:2]) == 2
    other = table.open("q", 0.0)
    assert table.claim(other, KEYS[:4], 0.0) == KEYS[:2]


def test_delivered_keys_are_held_until_commit_or_grace() -> None:
    table = ClaimTable(timeout=10.0, hold_s=30.0)
    sid = table.open("p", 0.0)
    table.claim(sid, KEYS[:2], 0.0)
    table.delivered(sid, KEYS[0], 1.0)
    table.delivered(sid, KEYS[1], 1.0)
    assert table.close(sid) == 0  # nothing undelivered to release
    assert table.is_claimed(KEYS[0], 20.0)  # waiting for dependencies: held
    assert table.committed(KEYS[0])  # a fetched event, stored: counted as stored from Recon
    assert not table.is_claimed(KEYS[0], 20.0)
    assert not table.committed(KEYS[0]) and not table.committed(KEYS[5])  # not fetched (now)
    assert not table.is_claimed(KEYS[1], 31.0)  # grace over: fetchable again


def test_close_releases_undelivered() -> None:
    table = ClaimTable(timeout=10.0)
    sid = table.open("p", 0.0)
    table.claim(sid, KEYS, 0.0)
    table.delivered(sid, KEYS[0], 0.0)
    assert table.close(sid) == 9
    assert table.released_total == 9
    assert len(table) == 0


def test_bounded() -> None:
    table = ClaimTable(timeout=10.0, max_keys=5)
    sid = table.open("p", 0.0)
    assert len(table.claim(sid, [i.to_bytes(4, "big") for i in range(1000)], 0.0)) == 5
    assert table.refused_total == 995
    for i in range(100):
        table.delivered(sid, i.to_bytes(4, "big"), 0.0)
        assert table.held <= 5


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ClaimTable(timeout=0)
