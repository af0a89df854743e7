"""Prompt Recon sessions (sync.replication.ReconLifecycle, sync.recon.PeerScheduler) on a fixed
clock: a peer that connects, or whose events show a gap, is reconciled with at once, not at the
next round (issue 37: a restarted node's next event waited ~25 s for a round to reach it)."""

from __future__ import annotations

import random

from sync.recon.eventid import CIP124_DRAFT, event_key
from sync.replication import LifecycleConfig, ReadStored, ReconLifecycle, Role, StartSession

OURS = [(b"\x10", b"\x40")]
T = 1000.0
PEERS = ["a", "b", "c", "d"]


def defaults() -> ReconLifecycle:
    """The lifecycle on the node's default settings (``[recon]``)."""
    cfg = LifecycleConfig.of(interval_s=10.0, gossip_grace_s=3.0, max_sessions=16,
                             claim_timeout_s=15.0, max_missing_keys=100_000)
    return ReconLifecycle("me", OURS, random.Random(7), cfg)


#: No peer's round trip measured yet.
NO_LATENCY: dict[str, float] = {}


def after_a_round(c: ReconLifecycle, peers: list[str]) -> None:
    """The first round has run and its session ended: the next round is seconds away."""
    (start,) = c.handle_timer(T, peers, NO_LATENCY)
    assert isinstance(start, StartSession)
    plan = c.begin(start.peer, Role.INITIATOR, T)
    assert plan is not None
    c.finished(plan, truncated=False, lowest_dropped=None, cuts=[])
    assert c.get_timer() >= T + 3.0


def test_a_peer_that_connects_is_reconciled_with_at_once() -> None:
    c = defaults()
    after_a_round(c, ["a", "c", "d"])
    assert c.connected("b", PEERS, T + 0.5)  # b restarted and came back
    assert c.get_timer() == T + 0.5
    assert c.handle_timer(T + 0.5, PEERS, NO_LATENCY) == [StartSession("b")]


def test_a_stranger_that_connects_to_us_gets_no_session_at_once() -> None:
    """A connection we did not dial only pokes the round: identities that connect and never
    answer must not each cost a session (holding their connections out of pruning)."""
    c = defaults()
    after_a_round(c, ["a", "c", "d"])
    assert c.connected("b", PEERS, T + 0.5, dialled=False) is None
    assert c.handle_timer(T + 0.5, PEERS, NO_LATENCY) == []


def test_a_gap_in_a_peers_events_reconciles_with_that_peer_at_once() -> None:
    c = defaults()
    after_a_round(c, PEERS)
    # An event of b's names dependencies we lack (b's burst, lost to gossip by its restart);
    # a sender not connected and an unknown one are no one to ask.
    assert c.gap(["b", "b", "gone", None], PEERS, T + 1.0) == (1, 0)
    assert c.handle_timer(T + 1.0, PEERS, NO_LATENCY) == [StartSession("b")]


def test_prompts_with_one_peer_come_at_most_once_per_interval() -> None:
    c = defaults()
    after_a_round(c, PEERS)
    assert c.gap(["b"], PEERS, T + 1.0) == (1, 0)
    assert c.handle_timer(T + 1.0, PEERS, NO_LATENCY) == [StartSession("b")]
    plan = c.begin("b", Role.INITIATOR, T + 1.0)
    assert plan is not None
    c.finished(plan, truncated=False, lowest_dropped=None, cuts=[])
    # b's next gaps (and reconnections) are deferred to 5 s after its last prompt session.
    assert c.gap(["b"], PEERS, T + 2.0) == (0, 1)
    assert not c.connected("b", PEERS, T + 2.5)
    assert c.get_timer() == T + 3.0  # the round (poked by the connection); b's prompt: T + 6
    assert c.handle_timer(T + 3.0, ["a"], NO_LATENCY) == [StartSession("a")]
    assert c.get_timer() == T + 6.0
    assert c.handle_timer(T + 6.0, PEERS, NO_LATENCY) == [StartSession("b")]


def test_a_peer_whose_events_always_show_gaps_gets_one_session_per_interval() -> None:
    c = defaults()
    now, started = T, 0
    while now < T + 60.0:
        c.gap(["b"], ["b"], now)
        for action in c.handle_timer(now, ["b"], NO_LATENCY) if now >= c.get_timer() else []:
            assert action == StartSession("b")
            plan = c.begin("b", Role.INITIATOR, now)
            assert plan is not None
            c.finished(plan, truncated=False, lowest_dropped=None, cuts=[])
            started += 1
        now += 0.1
    # Prompts every 5 s plus rounds (>= 3 s apart) could share the peer: never a loop.
    assert started <= 60 / 5 + 60 / 3 + 1


def test_a_prompt_waits_for_the_running_session_and_for_the_back_off() -> None:
    c = defaults()
    after_a_round(c, PEERS)
    running = c.begin("b", Role.RESPONDER, T + 1.0)  # b reconciles with us already
    assert running is not None
    c.gap(["b"], PEERS, T + 1.0)
    assert c.get_timer() > T + 1.0  # no busy loop while that session runs
    c.finished(running, truncated=False, lowest_dropped=None, cuts=[])
    assert c.get_timer() == T + 1.0
    assert c.handle_timer(T + 1.2, PEERS, NO_LATENCY) == [StartSession("b")]
    plan = c.begin("b", Role.INITIATOR, T + 1.2)
    c.failed(plan, "b", Role.INITIATOR, TimeoutError(), T + 1.2)  # backed off 2 s
    c.gap(["b"], PEERS, T + 7.0)  # past the 5-s limit; the back-off has ended too
    assert c.handle_timer(T + 7.0, PEERS, NO_LATENCY)[0] == StartSession("b")


def test_a_prompt_for_a_peer_that_left_is_dropped() -> None:
    c = defaults()
    after_a_round(c, PEERS)
    c.gap(["b"], PEERS, T + 1.0)
    c.disconnected("b", T + 1.0)
    assert StartSession("b") not in c.handle_timer(T + 10.0, ["a"], NO_LATENCY)


def test_a_prompt_session_leaves_nothing_to_the_gossip_grace_on_either_side() -> None:
    # The newest events of a peer killed mid-burst are seconds old when it is back: left to
    # gossip, they would wait for a round; gossip will never bring them (and a gap showed it
    # did not). Both sides prompted at once: whichever session goes on skips the grace.
    from sync.recon.eventid import CIP124_DRAFT, event_key

    now_ms = int(T * 1000)
    recent = event_key(1, "general", "b", now_ms - 500, b"\xab" * 32, CIP124_DRAFT)
    for role in Role:
        c = defaults()
        assert c.connected("b", PEERS, T)
        assert c.handle_timer(T, PEERS, NO_LATENCY)[0] == StartSession("b")
        ours = c.begin("b", Role.INITIATOR, T)
        assert ours is not None and ours.prompt
        plan = ours
        if role is Role.RESPONDER:  # b started one too; "b" < "me", so b declines ours
            plan = c.begin("b", Role.RESPONDER, T + 0.1)
            assert plan is not None and plan.prompt
        read = c.want(plan, [recent], T + 0.1, now_ms)[-1]
        assert list(getattr(read, "keys", ())) == [recent]
        if role is Role.RESPONDER:
            c.declined(ours)
        c.close(plan)
        c.finished(plan, truncated=False, lowest_dropped=None, cuts=[])
        # A later session with b (a round's) leaves the newest events to gossip again.
        c.poke()
        later = c.begin("b", Role.INITIATOR, T + 4.0)
        assert later is not None and not later.prompt
    # A round's session still leaves it to gossip.
    c = defaults()
    (start,) = c.handle_timer(T, ["a"], NO_LATENCY)
    plan = c.begin(start.peer, Role.INITIATOR, T)
    assert plan is not None and not plan.prompt
    assert list(getattr(c.want(plan, [recent], T, now_ms)[-1], "keys", ())) == []


def _fetches_recent_key(c: ReconLifecycle, peer: str, role: Role, now: float) -> bool:
    """A session with ``peer`` finds one key of an event stamped 0.5 s ago (within the 3 s
    gossip grace): does its fetch take it? The session then finishes."""
    plan = c.begin(peer, role, now)
    assert plan is not None
    now_ms = int(now * 1000)
    key = event_key(1, "general", peer, now_ms - 500, b"\xab" * 32, CIP124_DRAFT)
    read = c.want(plan, [key], now, now_ms)[-1]
    assert isinstance(read, ReadStored)
    c.close(plan)
    c.finished(plan, truncated=False, lowest_dropped=None, cuts=[])
    return list(read.keys) == [key]


def test_the_first_session_with_a_peer_connected_anew_leaves_nothing_to_gossip() -> None:
    """Issue 37: b restarts after a burst and dials a. b's newest events were never gossiped
    and b will not resend them; a's first session with b, as the responder of b's prompt
    session or its own round's initiator, fetches them all, not a round later. Sessions after
    that one leave events within the grace to gossip again."""
    for role in (Role.RESPONDER, Role.INITIATOR):
        c = defaults()
        after_a_round(c, ["a", "c", "d"])
        assert c.connected("b", PEERS, T + 0.5, dialled=False) is None
        assert _fetches_recent_key(c, "b", role, T + 1.0), role
        assert not _fetches_recent_key(c, "b", role, T + 20.0), role
        # Without a new connection, a session (a round's) leaves them to gossip.
        assert not _fetches_recent_key(c, "c", role, T + 21.0), role


def test_a_burst_cut_by_the_restart_is_fetched_whole_though_stamped_after_the_connection(
        ) -> None:
    """b was killed mid-burst and dials a again 1 s later. A burst's Lamport heights run ahead
    of the wall clock (``max(previous + 1, now)``: a millisecond per event above 1,000 a
    second), so the last events b stored before it died are stamped after the reconnection.
    a's first session with b fetches them all the same: stamped after the connection, they
    were left to gossip, which never brings them (6 of 1,168 came 6 s later,
    ``restart_catchup_bench.py``)."""
    for role in (Role.RESPONDER, Role.INITIATOR):
        before, tail = _key_of_b(-300, 1), _key_of_b(510, 2)
        fresh, fetched = _reconnected_b_fetches(role, T + 0.55, [before, tail])
        assert fresh and fetched == [before, tail], role


def _key_of_b(ms_after_t: int, tag: int) -> bytes:
    return event_key(1, "general", "b", int(T * 1000) + ms_after_t, bytes([tag]) * 32,
                     CIP124_DRAFT)


def _reconnected_b_fetches(role: Role, now: float, keys: list[bytes]
                           ) -> tuple[bool, list[bytes]]:
    """b connects again at T + 0.5 (it dialled us); a session with it begins at ``now`` and
    finds ``keys`` missing: (whether it is fresh, what its fetch takes)."""
    c = defaults()
    after_a_round(c, ["a", "c", "d"])
    assert c.connected("b", PEERS, T + 0.5, dialled=False) is None
    plan = c.begin("b", role, now)
    assert plan is not None and plan.prompt == plan.fresh
    read = c.want(plan, keys, now, int(now * 1000))[-1]
    assert isinstance(read, ReadStored)
    return plan.fresh, list(read.keys)


def test_what_a_peer_connected_anew_publishes_once_the_grace_has_passed_is_left_to_gossip(
        ) -> None:
    """The restarted b publishes a new event 3 s after it reconnected; its publish pokes a
    session with a, the first since the connection. That event travels by gossip: a session
    begun after the gossip grace of the connection is an ordinary one, which fetches what b
    held before and leaves the new one to gossip (seen once on CI: such a session fetched it
    as gossip delivered it, counting a live event as caught up). A gap's prompt session
    likewise leaves what was published after it started."""
    for role in (Role.RESPONDER, Role.INITIATOR):
        old, new = _key_of_b(200, 1), _key_of_b(3900, 2)
        assert _reconnected_b_fetches(role, T + 4.0, [old, new]) == (False, [old]), role
    c = defaults()
    after_a_round(c, ["a", "c", "d"])
    c.gap(["b"], PEERS, T + 5.0)
    assert StartSession("b") in c.handle_timer(T + 5.0, PEERS, NO_LATENCY)
    plan = c.begin("b", Role.INITIATOR, T + 5.0)
    assert plan is not None and plan.prompt
    now, now_ms = T + 5.5, int((T + 5.5) * 1000)
    lacked = event_key(1, "general", "b", now_ms - 1000, b"\x03" * 32, CIP124_DRAFT)
    live = event_key(1, "general", "b", now_ms - 200, b"\x04" * 32, CIP124_DRAFT)
    read = c.want(plan, [lacked, live], now, now_ms)[-1]
    assert isinstance(read, ReadStored) and list(read.keys) == [lacked]
