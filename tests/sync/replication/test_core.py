"""The node's one replication core (sync.replication.ReplicationCore) on a fixed clock: one timer
for Recon sessions and fetches by id, and the rules between them — a gap prompts a session
with its senders and is fetched after the grace, one fetch at a time, and what a fetch could
not close pokes the sessions."""

from __future__ import annotations

import random

from sync.replication import (
    FetchDue,
    GapPlanner,
    ReconcileSoon,
    ReplicationCore,
    Role,
    StartSession,
)
from sync.sds import MissingEntry
from tests.sync.replication.test_prompt_sessions import NO_LATENCY, T, after_a_round, defaults

PEERS = ["a", "b", "c"]


def core() -> ReplicationCore:
    """On the node's defaults; the first round has run and its session ended."""
    sessions = defaults()
    after_a_round(sessions, PEERS)
    return ReplicationCore(sessions, GapPlanner(1.0, 256, random.Random(3), 3))


def entry(mid: str, sender: str) -> MissingEntry:
    return MissingEntry(mid, None, sender)


def test_a_gap_prompts_its_sender_at_once_and_is_fetched_after_the_grace() -> None:
    c = core()
    assert c.get_timer() > T + 1.5  # the next round is seconds away
    at_once, deferred = c.missing([entry("m1", "b")], PEERS, T + 0.5)
    assert (at_once, deferred) == (1, 0)
    assert c.get_timer() == T + 0.5  # the prompt is due now, the fetch after the grace
    (start,) = c.handle_timer(T + 0.5, PEERS, NO_LATENCY)
    assert start == StartSession("b")
    plan = c.sessions.begin("b", Role.INITIATOR, T + 0.5)
    assert plan is not None
    c.sessions.finished(plan, truncated=False, lowest_dropped=None, cuts=[])
    assert c.get_timer() == T + 1.5  # the one timer: the fetch's grace ends first
    assert c.handle_timer(T + 1.4, PEERS, NO_LATENCY) == []
    (due,) = c.handle_timer(T + 1.5, PEERS, NO_LATENCY)
    assert isinstance(due, FetchDue) and [e.message_id for e in due.batch] == ["m1"]


def test_one_fetch_at_a_time_and_what_it_left_is_recons() -> None:
    c = core()
    c.missing([entry("m1", "b")], [], T)  # nobody connected: no prompt
    (due,) = c.handle_timer(T + 1.0, PEERS, NO_LATENCY)
    assert isinstance(due, FetchDue)
    c.missing([entry("m2", "c")], [], T + 1.0)
    # While the fetch runs the next is not due, however long it takes: the timer is Recon's.
    assert c.get_timer() > T + 2.0
    assert c.handle_timer(T + 2.0, PEERS, NO_LATENCY) == []
    plan = c.plan_fetch(due, {"m1"}, PEERS, ())
    assert plan.ids == {"m1"} and plan.peers[0] == "b"
    idle_round = c.sessions.get_timer()
    assert c.fetched(plan) == [ReconcileSoon(1)]  # nobody answered
    # Left to Recon: the sessions were poked (the round comes as soon as rounds may), and the
    # next fetch is due at once.
    assert c.sessions.get_timer() < idle_round
    (next_due,) = c.handle_timer(T + 2.0, PEERS, NO_LATENCY)
    assert isinstance(next_due, FetchDue) and [e.message_id for e in next_due.batch] == ["m2"]
    actions = c.handle_timer(c.get_timer(), PEERS, NO_LATENCY)
    assert any(isinstance(a, StartSession) for a in actions)


def test_a_fetch_that_closed_its_gap_leaves_recon_alone() -> None:
    c = core()
    c.missing([entry("m1", "b")], [], T)
    (due,) = c.handle_timer(T + 1.0, PEERS, NO_LATENCY)
    assert isinstance(due, FetchDue)
    plan = c.plan_fetch(due, {"m1"}, PEERS, ())
    c.gaps.received(plan, "m1")
    assert c.fetched(plan) == []
    assert c.get_timer() > T + 2.0  # no round was brought forward


def test_a_fetch_that_never_became_a_plan_still_ends() -> None:
    """Planning failed (the driver's answer raised): the core hears of the due fetch itself,
    leaves its ids to Recon and makes the next fetch due."""
    c = core()
    c.missing([entry("m1", "b")], [], T)
    (due,) = c.handle_timer(T + 1.0, PEERS, NO_LATENCY)
    assert isinstance(due, FetchDue)
    c.missing([entry("m2", "c")], [], T + 1.0)
    assert c.fetched(due) == [ReconcileSoon(1)]
    (next_due,) = [a for a in c.handle_timer(T + 2.0, PEERS, NO_LATENCY)
                   if isinstance(a, FetchDue)]
    assert [e.message_id for e in next_due.batch] == ["m2"]
