"""Claims on missing keys: they lapse, return to the pool, and are bounded."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.transfer import ClaimTable, Lapsed

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


# -- delivered keys are held until the store is done with them --------------------------------


def test_queued_keys_stay_held_however_slow_the_store() -> None:
    table = ClaimTable(timeout=10.0, hold_s=30.0)
    sid = table.open("p", 0.0)
    table.claim(sid, KEYS[:3], 0.0)
    for key in KEYS[:3]:
        table.delivered(sid, key, 1.0)
    table.queued(KEYS[:2])  # the third still waits for its dependencies in SDS
    assert table.queued_keys == 2
    # An hour later the store has not committed them: still not fetchable, sessions lapsing
    # or not; the one SDS may have evicted is.
    assert table.expire(3600.0) == []
    other = table.open("q", 3600.0)
    assert table.claim(other, KEYS[:3], 3600.0) == [KEYS[2]]
    assert table.committed(KEYS[0]) and table.committed(KEYS[1])
    assert table.queued_keys == 0
    assert table.claim(other, KEYS[:3], 3601.0) == [KEYS[0], KEYS[1]]


def test_stalled_session_loses_its_undelivered_claims_only() -> None:
    table = ClaimTable(timeout=10.0, hold_s=30.0)
    stalled = table.open("slow", 0.0)
    table.claim(stalled, KEYS, 0.0)
    table.delivered(stalled, KEYS[0], 1.0)
    table.queued([KEYS[0]])
    assert table.expire(11.0) == [("slow", 9)]  # the peer pays for the 9 it withheld
    honest = table.open("good", 11.0)
    assert table.claim(honest, KEYS, 11.0) == KEYS[1:]


def test_store_queue_full_refuses_claims() -> None:
    """The fetch runs at most ``max_keys`` ahead of the store."""
    table = ClaimTable(timeout=10.0, max_keys=4)
    sid = table.open("p", 0.0)
    assert table.claim(sid, KEYS[:4], 0.0) == KEYS[:4]
    for key in KEYS[:4]:
        table.delivered(sid, key, 0.0)
    table.queued(KEYS[:4])
    assert table.claim(sid, KEYS[4:6], 100.0) == []
    assert table.refused_total == 2
    table.committed(KEYS[0])
    assert table.claim(sid, KEYS[4:6], 100.0) == [KEYS[4]]


def test_late_delivery_beyond_the_bound_never_evicts_a_queued_hold() -> None:
    table = ClaimTable(timeout=10.0, max_keys=2)
    a = table.open("a", 0.0)
    table.claim(a, KEYS[:2], 0.0)
    table.expire(10.0)  # a stalled: its claims lapse
    b = table.open("b", 10.0)
    assert table.claim(b, KEYS[:2], 10.0) == KEYS[:2]
    table.delivered(b, KEYS[0], 11.0)
    table.queued([KEYS[0]])
    table.delivered(a, KEYS[1], 12.0)  # a's late delivery: no room, not held
    assert table.evicted_total == 1
    assert table.queued_keys == 1
    assert table.is_claimed(KEYS[0], 1e9)


def test_store_reports_unknown_keys_harmlessly() -> None:
    table = ClaimTable(timeout=10.0)
    table.queued(KEYS[:3])  # gossip and own events: not fetched by a session
    assert table.held == 0
    assert not table.committed(KEYS[0])


@dataclass
class _Model:
    """What the table must hold, from the outside: per session the keys it was given."""

    granted: dict[int, set[bytes]] = field(default_factory=dict)
    #: Delivered: the time of the delivery, until the store is done with the key.
    delivered_at: dict[bytes, float] = field(default_factory=dict)
    #: Delivered and then queued in the store, not committed yet.
    queued: set[bytes] = field(default_factory=set)
    store_queue: set[bytes] = field(default_factory=set)


_OPS = st.lists(st.tuples(
    st.sampled_from(["open", "claim", "deliver", "queue", "commit", "tick", "expire", "close"]),
    st.integers(0, 3), st.integers(0, 3), st.floats(0.0, 20.0)), max_size=60)


def _run(ops: list[tuple[str, int, int, float]], table: ClaimTable, model: _Model,
         strict: bool) -> None:
    now = 0.0
    sids: list[int] = []
    for op, i, k, dt in ops:
        key = KEYS[k]
        sid = sids[i % len(sids)] if sids else None
        queued_before = table.queued_keys
        if op == "open":
            sids.append(table.open(f"p{i}", now))
            model.granted[sids[-1]] = set()
        elif op == "claim" and sid is not None:
            got = table.claim(sid, KEYS[k:6] + KEYS[:k], now)
            assert len(got) == len(set(got))
            for key in got:
                # Never a key whose event waits in the store's queue.
                assert key not in model.queued
                if strict and key in model.delivered_at:
                    assert now >= model.delivered_at[key] + table.hold_s
            model.granted[sid].update(got)
        elif op == "deliver" and sid is not None and model.granted[sid]:
            key = sorted(model.granted[sid])[k % len(model.granted[sid])]
            table.delivered(sid, key, now)
            model.granted[sid].discard(key)
            if key not in model.queued:
                model.delivered_at[key] = now
        elif op == "queue":
            if model.delivered_at and k % 3:  # mostly what SDS passes on, sometimes gossip
                key = sorted(model.delivered_at)[k % len(model.delivered_at)]
            model.store_queue.add(key)
            table.queued([key])
            # Protected from here on if its SDS grace had not run out (after that, a session
            # may rightly be fetching it again already).
            if key in model.delivered_at and now < model.delivered_at[key] + table.hold_s:
                model.queued.add(key)
        elif op == "commit" and model.store_queue:
            key = sorted(model.store_queue)[k % len(model.store_queue)]
            model.store_queue.discard(key)
            model.queued.discard(key)
            model.delivered_at.pop(key, None)
            table.committed(key)
        elif op == "tick":
            now += dt
        elif op == "expire":
            table.expire(now)
        elif op == "close" and sid is not None:
            table.close(sid)
            sids.remove(sid)
        if op != "commit":
            assert table.queued_keys >= queued_before  # only a commit ends a queued hold
        assert len(table) + table.held <= table.max_keys


@settings(max_examples=400)
@given(_OPS)
def test_no_key_fetched_twice_while_delivered_and_uncommitted(
        ops: list[tuple[str, int, int, float]]) -> None:
    """Any interleaving of claims, deliveries, store queueing and commits, sessions stalling,
    lapsing and closing: a key delivered and not committed is claimed again only after its
    SDS grace (``hold_s``, before it reached the store), never while it waits in the store."""
    _run(ops, ClaimTable(timeout=5.0, hold_s=8.0), _Model(), strict=True)


@settings(max_examples=400)
@given(_OPS)
def test_bounded_table_never_drops_a_queued_hold(ops: list[tuple[str, int, int, float]]) -> None:
    _run(ops, ClaimTable(timeout=5.0, hold_s=8.0, max_keys=4), _Model(), strict=False)


def test_the_claim_timer_is_the_earliest_lapse() -> None:
    table = ClaimTable(timeout=10.0)
    assert table.get_timer() == math.inf
    a, b = table.open("a", 0.0), table.open("b", 0.0)
    assert table.get_timer() == math.inf  # sessions without claims: nothing can lapse
    table.claim(a, KEYS[:3], 1.0)
    table.claim(b, KEYS[3:6], 4.0)
    assert table.get_timer() == 11.0
    table.progress(a, 8.0)  # a delivered something: its claims live until 18
    assert table.get_timer() == 14.0
    assert table.handle_timer(13.9) == []
    assert table.handle_timer(14.0) == [Lapsed("b", 3)]
    assert table.lapsed_total == 3 and not table.is_claimed(KEYS[3], 14.0)
    assert table.get_timer() == 18.0  # b holds no claims any more
    for key in KEYS[:3]:
        table.delivered(a, key, 9.0)
    assert table.get_timer() == math.inf  # all delivered: held, not lapsing
    assert table.handle_timer(100.0) == []
