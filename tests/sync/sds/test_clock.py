"""The Lamport clock rule (sync.sds.clock): no received event moves a clock out of range."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.sds import Delivered, SdsConfig, encode_event, encode_state
from sync.sds.clock import (
    LAMPORT_MAX,
    REASON_AHEAD,
    REASON_RANGE,
    check_lamport,
    lamport_bound,
    recovered_clock,
)
from tests.sync.sds.helpers import CHANNEL, T0, channel, key, of_type

AHEAD = SdsConfig().max_lamport_ahead_ms
INT64_MAX = (1 << 63) - 1


def forged(lamport: int, content: bytes = b"x", sender: int = 1) -> bytes:
    """A validly signed event with any timestamp, as a hostile member would craft it."""
    k = key(sender)
    ch = channel(sender)
    return encode_event(CHANNEL, ch.setup.participant_id, lamport, (), content, k).wire


def test_bound_follows_wall_clock_and_stays_storable() -> None:
    assert lamport_bound(T0, 1000) == int(T0 * 1000) + 1000
    assert lamport_bound(1e300, 1000) == LAMPORT_MAX
    assert LAMPORT_MAX + (1 << 32) <= INT64_MAX


@pytest.mark.parametrize("lamport", [(1 << 64) - (1 << 32) - 1, (1 << 64) - 1, INT64_MAX,
                                     LAMPORT_MAX + 1])
def test_poisoned_timestamps_are_rejected_and_change_nothing(lamport: int) -> None:
    victim = channel(0)
    before = victim.layers.incoming.lamport
    with pytest.raises(RemoteProtocolError) as err:
        victim.receive(forged(lamport), T0)
    assert err.value.reason.startswith((REASON_RANGE, REASON_AHEAD))
    assert victim.layers.incoming.lamport == before
    assert victim.events() == []
    # The victim still publishes, at a storable timestamp.
    victim.send(b"after", T0 + 1)
    assert victim.layers.incoming.lamport <= int((T0 + 1) * 1000) + 1


def test_far_future_within_range_is_rejected_as_too_far_ahead() -> None:
    victim = channel(0)
    too_far = int(T0 * 1000) + AHEAD + 1
    with pytest.raises(RemoteProtocolError) as err:
        victim.receive(forged(too_far), T0)
    assert err.value.reason.startswith(REASON_AHEAD)
    # The same event is acceptable once the wall clock has caught up with it.
    victim.receive(forged(too_far), T0 + 1)
    assert [d.lamport for d in of_type(victim.events(), Delivered)] == [too_far]


def test_accepted_event_moves_the_clock_at_most_max_ahead() -> None:
    victim = channel(0)
    edge = int(T0 * 1000) + AHEAD
    victim.receive(forged(edge), T0)
    assert victim.layers.incoming.lamport == edge
    victim.events()


def test_no_ratchet_through_a_chain_of_events() -> None:
    """Each event max-ahead of the receiver's *clock* would ratchet; the rule uses wall time."""
    victim = channel(0)
    victim.receive(forged(int(T0 * 1000) + AHEAD), T0)
    with pytest.raises(RemoteProtocolError):
        victim.receive(forged(victim.layers.incoming.lamport + AHEAD, b"y"), T0)


def test_fetched_events_obey_the_rule_too() -> None:
    from sync.sds import decode_event

    victim = channel(0)
    event = decode_event(forged((1 << 64) - (1 << 32) - 1))
    with pytest.raises(RemoteProtocolError):
        victim.receive_event(event, T0)


@given(st.integers(0, (1 << 64) - 1), st.floats(0, 4e9))
def test_any_timestamp_either_rejected_or_leaves_a_storable_clock(lamport: int, now: float) -> None:
    try:
        check_lamport(lamport, now, AHEAD)
    except RemoteProtocolError:
        return
    assert lamport + (1 << 32) <= INT64_MAX


@given(st.integers(-(1 << 64), 1 << 64), st.floats(-1e12, 1e16, allow_nan=False),
       st.integers(0, 1 << 62))
def test_check_is_exactly_range_and_bound(lamport: int, now: float, ahead: int) -> None:
    """``check_lamport`` inlines ``lamport_bound`` (the receive path's fast form): it rejects
    exactly what is out of range or above the bound, whatever the clock (negative too)."""
    ok = 0 <= lamport <= LAMPORT_MAX and lamport <= lamport_bound(now, ahead)
    try:
        check_lamport(lamport, now, ahead)
    except RemoteProtocolError:
        assert not ok
    else:
        assert ok


def test_recovered_clock_ignores_out_of_range_values() -> None:
    now_ms = int(T0 * 1000)
    assert recovered_clock([now_ms - 5, now_ms + 10], T0, AHEAD) == (now_ms + 10, False)
    assert recovered_clock([(1 << 64) - 1, now_ms + 10], T0, AHEAD) == (now_ms + 10, True)
    assert recovered_clock([now_ms + AHEAD + 1], T0, AHEAD) == (now_ms, True)


def test_restore_recovers_a_poisoned_persisted_clock() -> None:
    ch = channel(0)
    ch.send(b"hello", T0)
    state = dataclasses.replace(ch.snapshot(), lamport=(1 << 64) - (1 << 32) - 1)
    log = [(mid, lamport) for lamport, mid in ch.layers.log.entries()]
    restored = type(ch).restore(encode_state(state), key(0), log=log,
                                config=ch.setup.config, now=T0 + 5)
    assert restored.layers.stats.clock_recovered
    assert restored.layers.incoming.lamport == int((T0 + 5) * 1000)
    restored.send(b"after restart", T0 + 5)
    assert restored.layers.incoming.lamport <= LAMPORT_MAX

    healthy = type(ch).restore(ch.snapshot(), key(0), log=log, config=ch.setup.config, now=T0 + 5)
    assert not healthy.layers.stats.clock_recovered
