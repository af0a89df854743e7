"""Ingest triage of verified events (sync.replication.ingest) into real SDS channels, on a fixed
clock: invalid events end the session and cost per event, policy refusals cost the least and
the session goes on, own echoes are stored only when SDS lost them, and any delivery order of a
causally complete set ends with the same delivered set, each after its dependencies."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import ErrorKind
from sync.gossip import SenderPolicy
from sync.ingest import IngestSpec, VerifiedBatch, verify_wires
from sync.replication import Penalize, Rejected, ingest_batch, order, screen
from sync.sds import Delivered, SdsChannel
from tests.sync.sds.helpers import CHANNEL, T0, channel

SPEC = IngestSpec(network_id=1)
LATER = T0 + 3600.0  # long after the events: old enough for SDS's bulk path
AHEAD_MS = 600_000


def history(n: int, seed: int) -> list[bytes]:
    """``n`` events by three senders who hear each other (so their histories name each
    other's events): a causally complete set, wires in send order."""
    rng = random.Random(seed)
    senders = [channel(i) for i in (1, 2, 3)]
    wires: list[bytes] = []
    for k in range(n):
        s = rng.randrange(3)
        now = T0 + k
        wire = senders[s].send(f"event {k}".encode(), now)
        wires.append(wire)
        for j, other in enumerate(senders):
            if j != s and rng.random() < 0.8:
                other.receive(wire, now)
                other.events()
    return wires


def feed(receiver: SdsChannel, wires: list[bytes], chunks: list[list[int]]
         ) -> tuple[list[str], list[object]]:
    """Feed ``wires`` in ``chunks`` (each a fetched batch) through the core; the ids in the
    order the receiver delivered them, and every action."""
    delivered: list[str] = []
    actions: list[object] = []
    policy = SenderPolicy(receiver.setup.participant_id)
    for chunk in chunks:
        part = [wires[i] for i in chunk]
        batch = verify_wires(SPEC, part)
        screened, error = screen(batch, "peer")
        assert error is None and not screened
        out = ingest_batch(batch, part, order(batch), "peer", {CHANNEL: receiver}, policy,
                           LATER, AHEAD_MS)
        actions += out.actions
        delivered += [r.message_id for r in out.records]
        delivered += [e.message_id for e in receiver.events() if isinstance(e, Delivered)]
    return delivered, actions


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.randoms(use_true_random=False), st.integers(1, 6))
def test_any_delivery_order_ends_with_the_same_set_in_causal_order(
        seed: int, rnd: random.Random, parts: int) -> None:
    wires = history(12, seed)
    reference = verify_wires(SPEC, wires)
    deps = dict(zip(reference.message_ids, reference.histories, strict=True))
    positions = list(range(len(wires)))
    rnd.shuffle(positions)
    cuts = sorted(rnd.sample(range(1, len(wires)), min(parts - 1, len(wires) - 1)))
    chunks = [positions[a:b] for a, b in zip([0, *cuts], [*cuts, len(wires)], strict=True)]
    delivered, actions = feed(channel(9), wires, chunks)
    assert sorted(delivered) == sorted(reference.message_ids)  # each once, none lost
    seen: set[str] = set()
    for mid in delivered:
        assert set(deps[mid]) <= seen, "delivered before a dependency"
        seen.add(mid)
    assert actions == []


def test_invalid_events_end_the_session_and_cost_per_event() -> None:
    wires = history(3, 1)
    forged = [w.replace(b"event", b"EVENT") for w in wires[:2]]  # content no longer signed
    batch = verify_wires(SPEC, [wires[2], *forged])
    actions, error = screen(batch, "peer")
    assert error is not None and error.kind is ErrorKind.INVALID_EVENTS and error.count == 2
    assert [type(a) for a in actions] == [Rejected, Rejected]


def test_policy_refusals_cost_the_least_and_the_rest_is_taken() -> None:
    wires = history(4, 2)
    receiver = channel(9)
    outsider = verify_wires(SPEC, wires).senders[0]
    members = frozenset({receiver.setup.participant_id} | {
        s for s in verify_wires(SPEC, wires).senders if s != outsider})
    batch = verify_wires(SPEC, wires)
    out = ingest_batch(batch, wires, order(batch), "peer", {CHANNEL: receiver},
                       SenderPolicy(receiver.setup.participant_id, members), LATER, AHEAD_MS)
    refused = [i for i, s in enumerate(batch.senders) if s == outsider]
    assert out.refused == len(refused)
    assert Penalize("peer", "rejected_event") in out.actions
    assert {a.kind for a in out.actions if isinstance(a, Rejected)} == {ErrorKind.NOT_MEMBER}
    assert len(out.taken) == len(wires) - len(refused)
    # The clock rule at ``now``: the same events seen from before they were made are refused.
    early = ingest_batch(batch, wires, order(batch), "peer", {CHANNEL: channel(8)},
                         SenderPolicy("x"), T0 - 3600.0, AHEAD_MS)
    assert early.refused == len(wires)


def test_own_echoes_are_stored_only_when_sds_no_longer_holds_them() -> None:
    me = channel(1)
    wire = me.send(b"mine", T0)
    me.events()
    batch = verify_wires(SPEC, [wire])
    policy = SenderPolicy(me.setup.participant_id)
    held = ingest_batch(batch, [wire], [0], "peer", {CHANNEL: me}, policy, LATER, AHEAD_MS)
    assert held.records == [] and held.taken == [batch.message_ids[0]]
    wiped = channel(1)  # the same key, a fresh state (a wiped database)
    lost = ingest_batch(batch, [wire], [0], "peer", {CHANNEL: wiped}, policy, LATER, AHEAD_MS)
    assert [r.message_id for r in lost.records] == [batch.message_ids[0]]
    assert not [e for e in wiped.events() if isinstance(e, Delivered)]  # never re-delivered


def test_order_is_lamport_then_key() -> None:
    b = VerifiedBatch(lamports=[5, 1, 5], keys=[b"b", b"z", b"a"])
    assert order(b) == [1, 2, 0]


def test_a_requester_over_its_repair_budget_pays_flood() -> None:
    from sync.replication import sds_penalty
    from sync.sds import Acknowledged, RepairRefused

    assert sds_penalty(RepairRefused("greedy", ("m",))) == Penalize("greedy", "flood")
    assert sds_penalty(Acknowledged("m")) is None
