"""The reconciliation phase of a Recon stream, sans-IO: frames, BUSY, the bound on missing
keys, the session deadline, and the gossip-grace filter on a fixed clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.recon import MemoryKeyStore, ReconConfig, ReconSession, event_key
from sync.recon.eventid import CERAMIC_ONE
from sync.recon.wire import decode_message
from sync.replication import Abort, Action, Charge, Declined, KeysDropped, Reconciled, SendFrame
from sync.transfer import (
    BUSY_FRAME,
    RECON,
    ReconExchange,
    causal_order,
    not_recent,
)
from sync.workbudget import recon_message_units
from tests.sync.recon.helpers import FULL

CONFIG = ReconConfig(fanout=2, key_list_threshold=2, split_levels=1)


def pair(ours: list[bytes], theirs: list[bytes], max_missing: int = 1000,
         charging: bool = False) -> tuple[ReconExchange, ReconExchange]:
    a = ReconSession.initiator(MemoryKeyStore.from_sorted(sorted(ours)), FULL, CONFIG, peer="b")
    b = ReconSession.responder(MemoryKeyStore.from_sorted(sorted(theirs)), FULL, CONFIG,
                               peer="a")
    return (ReconExchange(a, max_missing, "b", charging=charging),
            ReconExchange(b, max_missing, "a", charging=charging))


def first(a: ReconExchange) -> bytes:
    """The initiator's opening frame (a store in memory never waits for reads)."""
    (action,) = a.start()
    assert isinstance(action, SendFrame)
    return action.frame


def run(a: ReconExchange, b: ReconExchange,
        charges: list[tuple[bytes, int]] | None = None) -> list[KeysDropped]:
    """Shuttle frames until both sides are done, as the stream driver does (a charging
    side's ``Charge`` is noted in ``charges`` with its frame, then paid)."""
    dropped: list[KeysDropped] = []
    inbox_b: list[bytes] = [first(a)]
    inbox_a: list[bytes] = []
    while inbox_a or inbox_b:
        for frame_list, side, other in ((inbox_b, b, inbox_a), (inbox_a, a, inbox_b)):
            while frame_list and not side.done:
                frame = frame_list.pop(0)
                actions = side.receive(frame, now=0.0)
                if actions and isinstance(charge := actions[0], Charge):
                    assert charges is not None and len(actions) == 1
                    charges.append((frame, charge.units))
                    actions = side.charged(now=0.0)
                for action in actions:
                    if isinstance(action, SendFrame):
                        assert action.frame[0] == RECON
                        other.append(action.frame)
                    elif isinstance(action, KeysDropped):
                        dropped.append(action)
            frame_list.clear()
    return dropped


@given(st.sets(st.integers(0, 200), max_size=60), st.sets(st.integers(0, 200), max_size=60))
def test_missing_keys_found_both_ways(x: set[int], y: set[int]) -> None:
    ours = [i.to_bytes(2, "big") for i in x]
    theirs = [i.to_bytes(2, "big") for i in y]
    a, b = pair(ours, theirs)
    assert run(a, b) == []
    assert a.done and b.done and not a.truncated
    assert sorted(a.missing) == sorted(set(theirs) - set(ours))
    assert sorted(b.missing) == sorted(set(ours) - set(theirs))


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 300), max_size=120), st.sets(st.integers(0, 300), max_size=120))
def test_a_charging_exchange_asks_for_each_frames_price_then_runs_as_before(
        x: set[int], y: set[int]) -> None:
    ours = [i.to_bytes(2, "big") for i in x]
    theirs = [i.to_bytes(2, "big") for i in y]
    plain = pair(ours, theirs)
    run(*plain)
    charges: list[tuple[bytes, int]] = []
    charged = pair(ours, theirs, charging=True)
    run(*charged, charges=charges)
    assert [side.missing for side in charged] == [side.missing for side in plain]
    assert [side.session.messages_received for side in charged] == [
        side.session.messages_received for side in plain]
    assert len(charges) == sum(side.session.messages_received for side in charged)
    for frame, units in charges:  # the price of what the frame asks, as decoded
        assert units == recon_message_units(decode_message(frame[1:], CONFIG.limits))


def test_a_charging_exchange_answers_only_what_it_decoded() -> None:
    a, b = pair([b"k"], [b"j"], charging=True)
    with pytest.raises(LocalProtocolError):
        b.charged(now=0.0)  # nothing decoded yet
    (charge,) = b.receive(first(a), now=0.0)
    assert isinstance(charge, Charge) and charge.units >= 1
    answer = b.charged(now=0.0)  # the responder's last step: its frame, then the end
    assert [type(x) for x in answer] == [SendFrame, Reconciled]
    with pytest.raises(LocalProtocolError):
        b.charged(now=0.0)  # answered once
    _, c = pair([], [b"k"], charging=True)
    with pytest.raises(RemoteProtocolError):  # a malformed frame fails as it is decoded
        c.receive(bytes([RECON]) + b"\xff\xff\xff", now=0.0)
    assert c.done and c.session.error is not None


def test_missing_keys_bounded_and_counted() -> None:
    theirs = [i.to_bytes(2, "big") for i in range(50)]
    a, b = pair([], theirs, max_missing=20)
    dropped = run(a, b)
    assert len(a.missing) == 20 and set(a.missing) <= set(theirs)
    assert a.truncated and sum(d.count for d in dropped) == 30


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 1999), st.integers(1, 1500))
def test_missing_keys_come_in_causal_order_and_truncation_keeps_the_first(
        held: int, bound: int) -> None:
    # One sender's stream of 2,000 events; we hold its first ``held``. Reconciliation (default
    # settings) announces the ranges above the held part first (they settle sooner): keeping
    # the first announced would keep later events and drop the ones they depend on (fetched,
    # then evicted by SDS's bounded buffer, and fetched again).
    stream = [event_key(1, "chan", "sender", NOW_MS + h, h.to_bytes(32, "big"))
              for h in range(2000)]
    ours = MemoryKeyStore.from_sorted(stream[:held])
    a = ReconExchange(ReconSession.initiator(ours, FULL, peer="b"), bound, "b")
    b = ReconExchange(ReconSession.responder(MemoryKeyStore.from_sorted(stream), FULL,
                                             peer="a"), bound, "a")
    dropped = run(a, b)
    missing = stream[held:]
    assert a.truncated == (len(missing) > bound)
    assert a.missing == missing[:bound]  # the lowest heights, in causal order
    assert sum(d.count for d in dropped) == max(len(missing) - bound, 0)
    if a.truncated:
        assert a.lowest_dropped == missing[bound]


# Many keys in common and a few differences: more than one round trip to go (a range the peer
# lacks most of is answered with its keys at once, sync.recon.session).
MOSTLY_SHARED = ([i.to_bytes(2, "big") for i in range(2000)],
                 [i.to_bytes(2, "big") for i in range(3, 2003)])


def _noted(ends: list[Reconciled], actions: list[Action]) -> list[bytes]:
    """The frames of a step; its ``Reconciled`` (last, if any) noted in ``ends``."""
    at = [i for i, x in enumerate(actions) if isinstance(x, Reconciled)]
    assert at in ([], [len(actions) - 1])
    ends += [x for x in actions if isinstance(x, Reconciled)]
    return [x.frame for x in actions if isinstance(x, SendFrame)]


def test_the_step_that_ends_a_session_says_so_last_once_with_what_it_found() -> None:
    """``Reconciled`` comes after the last step's frame (the driver writes it, then ends the
    phase), once per side, with the keys kept, those dropped beyond the bound, and whether
    any were."""
    for ours, theirs, bound in ((*MOSTLY_SHARED, 1000), ([b"k"], [b"j"], 1000),
                                ([b"a", b"b", b"c"], [b"x", b"y", b"z"], 2), ([], [], 10)):
        a, b = pair(ours, theirs, max_missing=bound)
        ended: dict[str, list[Reconciled]] = {"a": [], "b": []}
        frames = _noted(ended["a"], a.start())
        turn = 0
        while frames:
            name, side = (("b", b), ("a", a))[turn]
            frames = _noted(ended[name], side.receive(frames[0], now=0.0))
            turn ^= 1
        assert a.done and b.done
        for side, (end,) in ((a, ended["a"]), (b, ended["b"])):
            assert (end.missing, end.dropped, end.truncated) == (
                len(side.missing), side.dropped, side.truncated)
        assert ended["a"][0].missing + ended["a"][0].dropped == len(set(theirs) - set(ours))


def test_busy_first_answer_declines() -> None:
    a, _ = pair([b"k"], [])
    a.start()
    assert a.receive(BUSY_FRAME, now=0.0) == [Declined()]
    assert a.declined and a.done
    with pytest.raises(LocalProtocolError):
        a.receive(BUSY_FRAME, now=0.0)


def test_busy_later_or_to_a_responder_breaks_the_protocol() -> None:
    _, b = pair([], [b"k"])
    with pytest.raises(RemoteProtocolError) as err:
        b.receive(BUSY_FRAME, now=0.0)
    assert err.value.peer == "a"
    a, b = pair(*MOSTLY_SHARED)
    reply = b.receive(first(a), now=0.0)[-1]
    assert isinstance(reply, SendFrame)
    a.receive(reply.frame, now=0.0)
    assert not a.done
    with pytest.raises(RemoteProtocolError):  # BUSY only as the first answer
        a.receive(BUSY_FRAME, now=0.0)


@pytest.mark.parametrize("frame", [b"", b"\x07junk", bytes([RECON]) + b"\xff\xff\xff"])
def test_bad_frames_are_remote_errors(frame: bytes) -> None:
    _, b = pair([], [b"k"])
    with pytest.raises(RemoteProtocolError):
        b.receive(frame, now=0.0)


def timed_pair(started: float, timeout_s: float) -> tuple[ReconExchange, ReconExchange]:
    """A pair with more than one round trip to go (enough keys on both sides)."""
    ours, theirs = MOSTLY_SHARED
    a, b = pair(ours, theirs)
    for side in (a, b):
        side.timeout_s, side.started = timeout_s, started
    return a, b


def test_the_deadline_is_the_timer_and_aborts_the_phase() -> None:
    a, b = timed_pair(started=100.0, timeout_s=60.0)
    assert a.get_timer() == b.get_timer() == 160.0
    assert a.handle_timer(159.999) == []
    reply = b.receive(first(a), now=120.0)[-1]
    assert isinstance(reply, SendFrame)
    a.receive(reply.frame, now=159.0)  # progress does not move the deadline
    assert not a.done and a.get_timer() == 160.0
    (abort,) = a.handle_timer(160.0)
    assert isinstance(abort, Abort) and "60 s" in abort.reason
    assert a.aborted and a.done and a.get_timer() == math.inf
    assert a.handle_timer(1e9) == []  # once
    with pytest.raises(LocalProtocolError):
        a.receive(reply.frame, now=161.0)


def test_a_frame_after_the_deadline_is_not_looked_at() -> None:
    a, b = timed_pair(started=0.0, timeout_s=5.0)
    opening = first(a)
    assert b.receive(opening, now=5.0) == [Abort("the reconciliation took longer than 5 s")]
    assert b.missing == [] and b.session.messages_received == 0
    # Even a frame that would break the protocol: the deadline is checked first.
    _, late = timed_pair(started=0.0, timeout_s=5.0)
    assert isinstance(late.receive(b"junk", now=7.5)[0], Abort)


def test_a_finished_or_declined_exchange_has_no_timer() -> None:
    a, b = pair([b"k"], [b"k", b"l"])
    for side in (a, b):
        side.timeout_s, side.started = 1.0, 0.0
    run(a, b)
    assert a.done and b.done and not a.aborted
    assert a.get_timer() == b.get_timer() == math.inf and a.handle_timer(100.0) == []
    busy, _ = pair([b"k"], [])
    busy.timeout_s = 1.0
    busy.start()
    busy.receive(BUSY_FRAME, now=0.5)
    assert busy.get_timer() == math.inf and busy.handle_timer(2.0) == []


@pytest.mark.parametrize("timeout_s", [0.0, -1.0, math.nan])
def test_the_timeout_must_be_positive(timeout_s: float) -> None:
    a, _ = pair([], [])
    with pytest.raises(ValueError):
        ReconExchange(a.session, 10, "b", timeout_s=timeout_s)


NOW_MS = 1_700_000_000_000
DIGEST = bytes(32)


def key(height: int) -> bytes:
    return event_key(1, "chan", "sender", height, DIGEST)


def test_not_recent_holds_back_what_gossip_is_delivering() -> None:
    recent = [key(NOW_MS), key(NOW_MS - 999), key(NOW_MS + 1000)]
    old = [key(NOW_MS - 1001), key(5)]
    future = [key(NOW_MS + 1001)]  # a sender's fast clock: fetched at once
    ceramic = event_key(1, "chan", "sender", NOW_MS, DIGEST, CERAMIC_ONE)  # no height
    malformed = b"\x01"
    keys = recent + old + future + [ceramic, malformed]
    assert not_recent(keys, NOW_MS, 1000) == old + future + [ceramic, malformed]
    assert not_recent(keys, NOW_MS, 0) == keys


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 500), st.booleans()), min_size=1,
                max_size=400, unique_by=lambda t: t[:2]),
       st.integers(1, 120))
def test_kept_keys_are_the_causally_first_whatever_the_senders_and_layouts(
        events: list[tuple[int, int, bool]], bound: int) -> None:
    # Several senders (key order: sender first, so heights jump back and forth as ranges
    # settle), some keys in the ceramic-one layout (no height: after all others), cut back
    # many times: the kept keys are always the causally first of all announced.
    keys = sorted(event_key(1, "chan", f"s{s}", NOW_MS + h, h.to_bytes(32, "big"),
                            CERAMIC_ONE if ceramic else "cip124-draft")
                  for s, h, ceramic in events)
    a = ReconExchange(ReconSession.initiator(MemoryKeyStore(), FULL, peer="b"), bound, "b")
    b = ReconExchange(ReconSession.responder(MemoryKeyStore.from_sorted(keys), FULL,
                                             peer="a"), bound, "a")
    dropped = run(a, b)
    assert a.missing == causal_order(keys)[:bound]
    assert sum(d.count for d in dropped) == a.dropped == max(len(keys) - bound, 0)
    if a.truncated:
        assert a.lowest_dropped == min(causal_order(keys)[bound:])
