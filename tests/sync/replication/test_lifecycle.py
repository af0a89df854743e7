"""The Recon session lifecycle core (sync.replication.ReconLifecycle) on a fixed clock: session
timing, backoff, which side fetches first, backlog ranges given back, claims and penalties."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import ErrorKind, RemoteProtocolError
from sync.replication import (
    ClaimsLapsed,
    KeysWithheld,
    LifecycleConfig,
    Penalize,
    ReadStored,
    ReconLifecycle,
    Released,
    Role,
    SessionFailed,
    StartSession,
)

OURS = [(b"\x10", b"\x40")]
T = 1000.0


def core(**kw: float) -> ReconLifecycle:
    cfg = LifecycleConfig(**{"interval_s": 10.0, "min_round_s": 1.0, **kw})  # type: ignore[arg-type]
    return ReconLifecycle("me", OURS, random.Random(1), cfg)


#: No peer's round trip measured yet.
NO_LATENCY: dict[str, float] = {}


def test_the_first_session_starts_at_once_and_the_next_after_a_round() -> None:
    c = core()
    assert c.handle_timer(T, ["a"], NO_LATENCY) == [StartSession("a")]
    assert c.handle_timer(T + 0.5, ["a"], NO_LATENCY) == []
    assert T + 1.0 <= c.get_timer() < T + 11.0
    c.poke()
    assert c.handle_timer(T + 1.0, ["a"], NO_LATENCY) == [StartSession("a")]


def test_the_initiator_fetches_first_and_one_session_per_pair() -> None:
    c = core()
    plan = c.begin("a", Role.INITIATOR, T)
    assert plan is not None and plan.fetch_first and plan.scope is None
    assert c.begin("a", Role.INITIATOR, T) is None  # one session per pair
    # A simultaneous start: the side with the smaller id declines the peer's.
    assert c.begin("z", Role.INITIATOR, T) is not None
    assert c.begin("z", Role.RESPONDER, T) is None  # "me" < "z": we keep ours
    other = c.begin("b", Role.RESPONDER, T)
    assert other is not None and not other.fetch_first


def test_a_protocol_fault_costs_by_its_kind_and_backs_the_peer_off() -> None:
    c = core()
    plan = c.begin("a", Role.INITIATOR, T)
    err = RemoteProtocolError("3 bad events", "a", ErrorKind.INVALID_EVENTS, 3)
    actions = c.failed(plan, "a", Role.INITIATOR, err, T)
    assert Penalize("a", "invalid_event", 3.0) in actions
    failed = [a for a in actions if isinstance(a, SessionFailed)]
    assert failed == [SessionFailed("a", Role.INITIATOR, ErrorKind.INVALID_EVENTS, 2.0)]
    # Backed off: the next round chooses nobody while "a" is the only peer.
    c.poke()
    assert c.handle_timer(T + 1.0, ["a"], NO_LATENCY) == []
    # A timeout costs nothing but the backoff.
    plan = c.begin("b", Role.INITIATOR, T)
    actions = c.failed(plan, "b", Role.INITIATOR, TimeoutError(), T)
    assert not [a for a in actions if isinstance(a, Penalize)]


def test_a_truncated_session_queues_ranges_and_a_failed_one_gives_its_range_back() -> None:
    c = core()
    plan = c.begin("a", Role.INITIATOR, T)
    assert plan is not None
    plan.fetched = 5
    more = c.finished(plan, truncated=True, lowest_dropped=b"\x20", cuts=[b"\x30"])
    assert more and len(c.backlog) == 2
    second = c.begin("b", Role.INITIATOR, T)
    assert second is not None and second.scope == (b"\x20", b"\x30")
    c.failed(second, "b", Role.INITIATOR, TimeoutError(), T)
    third = c.begin("c", Role.RESPONDER, T)
    assert third is not None and third.scope == (b"\x20", b"\x30")  # retried first
    c.declined(third)
    assert c.begin("d", Role.INITIATOR, T).scope == (b"\x20", b"\x30")  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ok", "fail", "decline"]), min_size=1, max_size=30))
def test_a_failed_sessions_range_is_always_retried(outcomes: list[str]) -> None:
    """Whatever happens to the sessions, every range a truncated session queued is eventually
    reconciled by a session that went through: none is lost to a failure or a BUSY."""
    c = core()
    first = c.begin("p", Role.INITIATOR, T)
    assert first is not None
    cuts = [bytes([0x20 + i]) for i in range(1, 8)]
    c.finished(first, truncated=True, lowest_dropped=b"\x20", cuts=cuts)
    queued = set(c.backlog._ranges)
    done: set[tuple[bytes, bytes]] = set()
    steps = [*outcomes, *["ok"] * (len(queued) + 1)]  # then the failures stop
    for n, outcome in enumerate(steps):
        plan = c.begin(f"p{n}", Role.INITIATOR, T + n)
        assert plan is not None
        if outcome == "fail":
            c.failed(plan, plan.peer, Role.INITIATOR, RemoteProtocolError("x"), T + n)
        elif outcome == "decline":
            c.declined(plan)
        else:
            c.finished(plan, truncated=False, lowest_dropped=None, cuts=[])
            if plan.scope is not None:
                done.add(plan.scope)
    assert done == queued and len(c.backlog) == 0


def test_claims_read_the_store_then_fetch_and_withheld_keys_cost_the_peer() -> None:
    c = core(claim_timeout_s=5.0)
    plan = c.begin("a", Role.INITIATOR, T)
    assert plan is not None
    actions = c.want(plan, [b"k1", b"k2", b"k3"], T, int(T * 1000))
    read = actions[-1]
    assert isinstance(read, ReadStored) and list(read.keys) == [b"k1", b"k2", b"k3"]
    assert c.stored(read.ticket, {b"k2"}) == [b"k1", b"k3"]
    # A second session does not claim what the first is fetching.
    other = c.begin("b", Role.INITIATOR, T)
    assert other is not None
    again = c.want(other, [b"k1", b"k3", b"k4"], T, int(T * 1000))[-1]
    assert isinstance(again, ReadStored) and list(again.keys) == [b"k4"]
    c.delivered(read.ticket, [b"k1"], T + 1)
    assert c.answer_done(read.ticket, [b"k3"]) == [
        KeysWithheld("a", 1), Penalize("a", "short_answer"), Released()]
    # The other session stops delivering: its claim lapses and the peer pays.
    lapsed = c.handle_timer(T + 10.0, [], NO_LATENCY)
    assert ClaimsLapsed("b", 1) in lapsed and Penalize("b", "withheld") in lapsed


def test_gossip_is_left_the_keys_it_is_still_delivering() -> None:
    from sync.recon.eventid import CIP124_DRAFT, event_key

    c = core(gossip_grace_ms=2000)
    plan = c.begin("a", Role.INITIATOR, T)
    assert plan is not None
    now_ms = int(T * 1000)
    key = event_key(1, "general", "sender", now_ms - 500, b"\xab" * 32, CIP124_DRAFT)
    old = event_key(1, "general", "sender", now_ms - 60_000, b"\xcd" * 32, CIP124_DRAFT)
    read = c.want(plan, [key, old], T, now_ms)[-1]
    assert isinstance(read, ReadStored) and list(read.keys) == [old]


def test_keys_left_to_gossip_are_fetched_the_round_after_the_grace() -> None:
    # Issue 37: the peers of a node back from a crash reconcile with it at once, find its last
    # burst within the gossip grace and leave it to gossip, which the restarted node will not
    # resend; the next round must come once the grace passed, not a whole interval later.
    from sync.recon.eventid import CIP124_DRAFT, event_key

    cfg = LifecycleConfig.of(interval_s=10.0, gossip_grace_s=3.0, max_sessions=4,
                             claim_timeout_s=15.0, max_missing_keys=1000)
    for recent, due in ((True, T + cfg.min_round_s), (False, T + cfg.min_round_s + 5.0)):
        c = ReconLifecycle("me", OURS, random.Random(1), cfg)
        assert c.handle_timer(T, ["a"], NO_LATENCY) == [StartSession("a")]
        plan = c.begin("a", Role.INITIATOR, T)
        assert plan is not None
        height = int(T * 1000) - (500 if recent else 60_000)
        key = event_key(1, "general", "sender", height, b"\xab" * 32, CIP124_DRAFT)
        read = c.want(plan, [key], T, int(T * 1000))[-1]
        assert isinstance(read, ReadStored) and bool(read.keys) is not recent
        fetched = c.stored(read.ticket, set())
        c.delivered(read.ticket, fetched, T)
        c.queued(fetched)
        c.committed(fetched, set())
        c.close(plan)
        c.finished(plan, truncated=False, lowest_dropped=None, cuts=[])
        # Left to gossip: the next round min_round_s (3 s, the grace) after this one; else
        # after min_round_s plus half to all of the interval.
        assert (c.get_timer() == due) if recent else (c.get_timer() >= due)


def test_commits_end_holds_and_count_what_was_fetched() -> None:
    c = core()
    plan = c.begin("a", Role.INITIATOR, T)
    assert plan is not None
    read = c.want(plan, [b"k1", b"k2"], T, int(T * 1000))[-1]
    assert isinstance(read, ReadStored)
    c.stored(read.ticket, set())
    c.delivered(read.ticket, [b"k1", b"k2"], T)
    c.queued([b"k1", b"k2"])
    c.close(plan)
    stored, fetched = c.committed([b"k1", b"k2", b"k9"], {b"k1", b"k9"})
    assert stored == [b"k1", b"k9"] and fetched == 1


def test_the_nodes_settings_become_the_lifecycles() -> None:
    cfg = LifecycleConfig.of(interval_s=30.0, gossip_grace_s=2.5, max_sessions=4,
                             claim_timeout_s=20.0, max_missing_keys=1000)
    assert (cfg.min_round_s, cfg.gossip_grace_ms, cfg.max_claimed_keys) == (2.5, 2500, 4000)
    assert LifecycleConfig.of(interval_s=30.0, gossip_grace_s=0.0, max_sessions=4,
                              claim_timeout_s=20.0, max_missing_keys=10).min_round_s == 1.0
