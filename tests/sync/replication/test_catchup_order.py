"""A Recon catch-up of a peer that already holds part of a stream (the gossip it heard before
the sender crashed), through the real cores on a fixed clock: a ``ReconSession`` in a
``ReconExchange`` finds the missing keys (and puts them in the order to fetch them),
``ReconLifecycle`` claims them, they are cut into want lists of the node's default size (as
``WantFetcher`` does), and each answer takes the one ingest path (``verify_wires``, ``order``,
``ingest_batch``) into a real ``SdsChannel`` with the default (bounded) dependency buffer.

What must hold (issue 37, "catch-up after a restart crawls"): one session delivers every
missing event, none is evicted from SDS's dependency buffer, and so none is ever fetched twice.
Reconciliation announces the keys above the held part first (those ranges settle in fewer
round trips than the one the held part cuts), so fetched in announcement order most of the
stream came before its dependencies and was evicted (``sync.transfer.causal``).
"""

from __future__ import annotations

import random
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.gossip import SenderPolicy
from sync.ingest import IngestSpec, VerifiedBatch, verify_wires
from sync.recon import MemoryKeyStore, ReconSession, network_bounds
from sync.replication import (
    LifecycleConfig,
    ReadStored,
    ReconLifecycle,
    Role,
    SendFrame,
    ingest_batch,
    order,
    screen,
)
from sync.sds import Delivered, Evicted, SdsChannel
from sync.transfer import ReconExchange
from tests.sync.sds.helpers import CHANNEL, T0, channel

SPEC = IngestSpec(network_id=1)
AHEAD_MS = 600_000
#: More than SDS's default dependency buffer holds per sender (1,000).
BURST = 2_500
#: The node's default ``recon.fetch_batch`` and ``recon.max_missing_keys``.
FETCH_BATCH = 500
MAX_MISSING = 100_000


@cache
def burst() -> tuple[list[bytes], VerifiedBatch]:
    """A sender's burst: ``BURST`` events 0.5 ms apart, each naming the one before."""
    sender = channel(1)
    wires = [sender.send(f"burst {k}".encode(), T0 + k / 2000) for k in range(BURST)]
    return wires, verify_wires(SPEC, wires)


def reconcile(ours: ReconExchange, theirs: ReconExchange) -> list[bytes]:
    """Carry frames between the two sides of a reconciliation, as the stream driver does;
    the keys our side found missing (``ReconExchange.missing``)."""
    to_theirs, to_ours = [a.frame for a in ours.start() if isinstance(a, SendFrame)], []
    while to_theirs or to_ours:
        for inbox, side, outbox in ((to_theirs, theirs, to_ours), (to_ours, ours, to_theirs)):
            for frame in inbox:
                if not side.done:
                    outbox += [a.frame for a in side.receive(frame, now=0.0)
                               if isinstance(a, SendFrame)]
            inbox.clear()
    assert ours.done and theirs.done
    return ours.missing


def catch_up(held: set[int], now: float) -> tuple[set[str], int, int]:
    """A receiver that got the events ``held`` by gossip reconciles once with the sender and
    fetches what it lacks; (ids delivered by the fetch, evictions, events fetched)."""
    wires, verified = burst()
    receiver: SdsChannel = channel(9)
    for i in sorted(held):
        receiver.receive(wires[i], T0 + i / 2000)
    receiver.events()
    ours = MemoryKeyStore()
    for i in held:
        ours.insert(verified.keys[i])
    theirs = MemoryKeyStore()
    for key in verified.keys:
        theirs.insert(key)
    interests = [network_bounds(1)]
    found = reconcile(ReconExchange(ReconSession.initiator(ours, interests), MAX_MISSING),
                      ReconExchange(ReconSession.responder(theirs, interests), MAX_MISSING))

    core = ReconLifecycle("me", interests, random.Random(1), LifecycleConfig())
    plan = core.begin("sender", Role.INITIATOR, now)
    assert plan is not None
    read = core.want(plan, found, now, int(now * 1000))[-1]
    assert isinstance(read, ReadStored)
    keys = core.stored(read.ticket, set())
    by_key = dict(zip(verified.keys, wires, strict=True))
    policy = SenderPolicy(receiver.setup.participant_id)
    delivered: set[str] = set()
    evicted = fetched = 0
    # The want lists, in the order they are sent (``sync.transfer.WantFetcher`` cuts the
    # claimed keys into runs of ``batch``); each answer is ingested before the next.
    for chunk in (keys[i : i + FETCH_BATCH] for i in range(0, len(keys), FETCH_BATCH)):
        part = [by_key[k] for k in chunk]
        batch = verify_wires(SPEC, part)
        assert screen(batch, "sender") == ([], None)
        out = ingest_batch(batch, part, order(batch), "sender", {CHANNEL: receiver}, policy,
                           now, AHEAD_MS)
        assert out.actions == []
        fetched += len(part)
        delivered.update(r.message_id for r in out.records)
        for event in receiver.events():
            if isinstance(event, Delivered):
                delivered.add(event.message_id)
            elif isinstance(event, Evicted):
                evicted += 1
    return delivered, evicted, fetched


@settings(max_examples=8, deadline=None)
@given(prefix=st.integers(0, BURST - 1), recent=st.booleans())
def test_one_session_delivers_the_whole_backlog_and_evicts_nothing(
        prefix: int, recent: bool) -> None:
    # Gossip delivered a prefix of the burst (the log holds only what SDS delivered, and the
    # stream is a chain, so what a peer holds of it is a prefix).
    held = set(range(prefix))
    # Right after the restart (the live window: SDS's full step) or long after (bulk path).
    now = T0 + (10.0 if recent else 3600.0)
    delivered, evicted, fetched = catch_up(held, now)
    _, verified = burst()
    lacking = {verified.message_ids[i] for i in range(BURST) if i not in held}
    assert evicted == 0
    assert fetched == len(lacking)
    assert delivered == lacking


def test_a_peer_holding_the_first_third_catches_up_in_one_session() -> None:
    delivered, evicted, _ = catch_up(set(range(BURST // 3)), T0 + 10.0)
    assert evicted == 0
    assert len(delivered) == BURST - BURST // 3
