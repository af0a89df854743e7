"""The node's one replication core (sync.replication.ReplicationCore) on a fixed clock: one timer
for Recon sessions and fetches by id, and the rules between them — a gap prompts a session
with its senders and is fetched after the grace, one fetch at a time, and what a fetch could
not close pokes the sessions; and a session's own inputs (frames, key-store reads) going in
through the core, which holds the session's reconciliation."""

from __future__ import annotations

import random

import pytest

from sync.errors import LocalProtocolError
from sync.recon import (
    KeysRead,
    KeyStore,
    MemoryKeyStore,
    ReconConfig,
    SummaryKeyStore,
    carry_out_reads,
    insert_keys,
)
from sync.replication import (
    Abort,
    Action,
    ChannelSet,
    ExchangeSetup,
    FetchDue,
    GapPlanner,
    LifecycleConfig,
    ReadStored,
    Reconciled,
    ReconcileSoon,
    ReconLifecycle,
    ReplicationCore,
    Role,
    SendFrame,
    SessionPlan,
    StartSession,
)
from sync.sds import MissingEntry
from tests.sync.recon.helpers import FULL
from tests.sync.recon.test_reads import GuardedSource
from tests.sync.replication.test_prompt_sessions import NO_LATENCY, T, after_a_round, defaults

PEERS = ["a", "b", "c"]


def core() -> ReplicationCore:
    """On the node's defaults; the first round has run and its session ended."""
    sessions = defaults()
    after_a_round(sessions, PEERS)
    return ReplicationCore(sessions, GapPlanner(1.0, 256, random.Random(3), 3),
                           ExchangeSetup(MemoryKeyStore.from_sorted([]), ReconConfig(), 100_000),
                           ChannelSet.of({}, "a", 1))


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
    plan = c.begin("b", Role.INITIATOR, T + 0.5)
    assert plan is not None
    c.finished(plan)
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


def _node(own: str, keys: list[bytes]) -> tuple[ReplicationCore, GuardedSource]:
    """A core over an asking key store (no cache: every step that reads asks) and the log its
    reads are answered from."""
    source = GuardedSource([])
    store = SummaryKeyStore(load=4, max_buckets=64, cache_keys=0)
    insert_keys(store, [k for k in keys if source.add(k)], source)
    lifecycle = ReconLifecycle(own, FULL, random.Random(5), LifecycleConfig())
    return ReplicationCore(lifecycle, GapPlanner(1.0, 256, random.Random(3), 3),
                           ExchangeSetup(store, ReconConfig(key_list_threshold=4), 10_000,
                                         timeout_s=60.0),
                           ChannelSet.of({}, own, 1)), source


def test_a_sessions_frames_and_reads_go_in_through_the_core() -> None:
    """Two cores reconcile: each frame goes in with ``receive``, each ``ReadKeys`` comes out as
    an action and its answer goes back in with ``keys_read`` (the source is never read inside a
    step), the end comes out as ``Reconciled``, and the fetch phase claims what it found."""
    ours = [bytes([i, i]) for i in range(0, 240, 2)]
    theirs = [bytes([i, i]) for i in range(0, 240, 3)]
    (a, source_a), (b, source_b) = _node("a", ours), _node("b", theirs)
    plan_a = a.begin("b", Role.INITIATOR, T)
    plan_b = b.begin("a", Role.RESPONDER, T)
    assert plan_a is not None and plan_b is not None
    assert a.session_timer(plan_a) == T + 60.0
    reads = 0
    ended: dict[str, Reconciled] = {}

    def step(name: str, core: ReplicationCore, plan: SessionPlan, source: GuardedSource,
             actions: list[Action]) -> list[bytes]:
        def guarded(answer: KeysRead) -> list[Action]:
            nonlocal reads
            reads += 1
            source.in_step = True  # the step the answer resumes must not read the source
            try:
                return core.keys_read(plan, answer)
            finally:
                source.in_step = False

        actions = carry_out_reads(actions, source, guarded)
        for action in actions:
            if isinstance(action, Reconciled):
                ended[name] = action
        return [x.frame for x in actions if isinstance(x, SendFrame)]

    frames = step("a", a, plan_a, source_a, a.start(plan_a))
    sides: tuple[tuple[str, ReplicationCore, SessionPlan, GuardedSource], ...] = (
        ("b", b, plan_b, source_b), ("a", a, plan_a, source_a))
    turn = 0
    while frames:
        name, core, plan, source = sides[turn]
        frames = step(name, core, plan, source, core.receive(plan, frames[0], T))
        turn ^= 1
    assert reads > 0
    assert ended["a"].missing == len(set(theirs) - set(ours)) and not ended["a"].truncated
    assert ended["b"].missing == len(set(ours) - set(theirs))
    assert a.session_timer(plan_a) == float("inf")  # over: no deadline
    a.reconciled(plan_a)
    *_, read = a.want(plan_a, T, 0)
    assert isinstance(read, ReadStored)
    assert set(a.sessions.stored(read.ticket, set())) == set(theirs) - set(ours)
    a.sessions.close(plan_a)
    assert a.sessions_open() == 1
    assert a.finished(plan_a) is False  # not truncated: nothing follows at once
    assert a.sessions_open() == 0
    with pytest.raises(LocalProtocolError):  # the core forgot the session
        a.receive(plan_a, b"\x01", T)


def test_a_session_that_fails_or_is_declined_is_forgotten() -> None:
    store: KeyStore = MemoryKeyStore.from_sorted([b"k"])
    c = ReplicationCore(ReconLifecycle("a", FULL, random.Random(5), LifecycleConfig()),
                        GapPlanner(1.0, 256, random.Random(3), 3),
                        ExchangeSetup(store, ReconConfig(), 100, timeout_s=5.0),
                        ChannelSet.of({}, "a", 1))
    declined = c.begin("b", Role.INITIATOR, T)
    failed = c.begin("c", Role.INITIATOR, T)
    cancelled = c.begin("d", Role.RESPONDER, T)
    assert declined and failed and cancelled and c.sessions_open() == 3
    assert len({declined.id, failed.id, cancelled.id}) == 3
    c.declined(declined)
    c.failed(failed, "c", Role.INITIATOR, None, T)
    (abort,) = c.handle_session_timer(cancelled, T + 5.0)  # the deadline, before it is dropped
    assert isinstance(abort, Abort)
    c.abandoned(cancelled)
    assert c.sessions_open() == 0
