"""The SDS channels as a part of the replication core (``sync.replication.ChannelSet``), on a
fixed clock: every input goes in with ``now``, what the channels report comes out as actions
(deliveries as records to store, gaps, broadcasts, refusals and their penalties), and a step
that needs the store asks ``ReadLog`` and waits for ``delivered_read``."""

from __future__ import annotations

import random

import pytest

from sync.errors import LocalProtocolError
from sync.gossip import GossipLimits, pack_batch
from sync.replication import (
    Action,
    Broadcast,
    ChannelNote,
    ChannelSet,
    GapFound,
    Penalize,
    ReadLog,
    Rejected,
    StoreDelivered,
)
from sync.sds import Acknowledged, SdsChannel, SdsConfig, decode_event
from tests.sync.sds.helpers import CHANNEL, T0, channel
from tests.sync.sds.test_window import CFG, group_wires


def _set(ch: SdsChannel, **kw: object) -> ChannelSet:
    return ChannelSet.of({CHANNEL: ch}, ch.setup.participant_id, 1, **kw)  # type: ignore[arg-type]


def _stored(actions: list[Action]) -> list[str]:
    return [r.message_id for a in actions if isinstance(a, StoreDelivered) for r in a.records]


def test_deliveries_come_out_as_records_and_a_gap_as_gap_found() -> None:
    peer = channel(1, signed=False)
    first, second = peer.send(b"one", T0), peer.send(b"two", T0)
    ours = _set(channel(2, signed=False))
    assert ours.receive(CHANNEL, second, T0, "p1") == []
    out = ours.drain(CHANNEL)
    gap = [a for a in out if isinstance(a, GapFound)]
    assert [e.message_id for g in gap for e in g.entries] == [
        decode_event(first, verify_signature=False).message_id]
    assert _stored(out) == [] and isinstance(out[-1], StoreDelivered)
    assert ours.is_missing(gap[0].entries[0].message_id)
    ours.receive(CHANNEL, first, T0, "p1")
    # Both delivered at once, in causal order, as the records the driver stores.
    assert _stored(ours.drain(CHANNEL)) == [decode_event(w, verify_signature=False).message_id
                                            for w in (first, second)]
    assert not ours.is_missing(gap[0].entries[0].message_id)


def test_a_step_that_needs_the_store_asks_and_waits_for_the_answer() -> None:
    wires = group_wires(2, 200, 4)
    ours = _set(SdsChannel(CHANNEL, "p9", None, CFG, random.Random(9), T0, False, bounded=True))
    log: set[str] = set()
    for wire in wires:  # every question answered from ``log``, the driver's store
        actions = ours.receive(CHANNEL, wire, T0 + 5, "p0")
        while actions and isinstance(read := actions[-1], ReadLog):
            actions = ours.delivered_read(CHANNEL, log & set(read.read.ids))
        log |= set(_stored(ours.drain(CHANNEL)))
    assert len(log) == len(wires) > CFG.delivered_window
    # The oldest is out of memory: receiving it again is a question, nothing else.
    asked = ours.receive(CHANNEL, wires[0], T0 + 6, "p0")
    assert len(asked) == 1 and isinstance(asked[0], ReadLog) and asked[0].channel == CHANNEL
    assert decode_event(wires[0], verify_signature=False).message_id in asked[0].read.ids
    assert ours.delivered_read(CHANNEL, log & set(asked[0].read.ids)) == []
    assert _stored(ours.drain(CHANNEL)) == []  # a duplicate: not delivered again
    with pytest.raises(LocalProtocolError):  # no step waits any more
        ours.delivered_read(CHANNEL, set())


def test_a_refused_item_costs_its_peer_unless_it_only_relayed() -> None:
    ours = _set(channel(2, signed=False))
    for penalise, expected in ((True, [Penalize]), (False, [])):
        out = ours.receive(CHANNEL, b"\x00 not a message", T0, "p7", penalise=penalise)
        assert isinstance(out[0], Rejected) and out[0].peer == "p7"
        assert [type(a) for a in out[1:]] == expected


def test_gossip_over_the_neighbours_budget_is_refused_and_charged_only_to_a_publisher() -> None:
    peer = channel(1, signed=False)
    ours = _set(channel(2, signed=False), gossip_limits=GossipLimits(peer_rate=1.0, peer_burst=2))
    batch = pack_batch([peer.send(b"e%d" % i, T0) for i in range(3)])
    actions, items = ours.gossip(batch, "p1", "p1", T0, direct=True)
    assert len(items) == 2  # the burst
    assert [type(a) for a in actions] == [Rejected, Penalize]
    actions, items = ours.gossip(batch, "p1", "p3", T0, direct=False)
    assert items == [] and all(isinstance(a, Rejected) for a in actions) and actions


def test_timers_and_publishing_come_out_as_broadcasts_and_own_records() -> None:
    config = SdsConfig(resend_interval=1.0, sync_interval=1000.0)
    ch = SdsChannel(CHANNEL, "p2", None, config, random.Random(2), T0, False)
    ours = _set(ch)
    sent = ours.publish(CHANNEL, [b"a", b"b"], T0)
    assert len(sent.wires) == 2 and sent.error is None
    assert [d.message_id for d in sent.own] == _stored(sent.actions)
    due = ours.get_timer()
    assert due is not None and due > T0
    resent = ours.handle_timer(due)
    ids = {decode_event(a.datagram, verify_signature=False).message_id
           for a in resent if isinstance(a, Broadcast)}
    assert ids >= set(_stored(sent.actions))  # both resent, unacknowledged
    # A peer's acknowledgement comes out as a note to count.
    peer = SdsChannel(CHANNEL, "p1", None, config, random.Random(1), T0, False)
    for wire in sent.wires:
        peer.receive(wire, T0)
    ours.receive(CHANNEL, peer.send(b"ack", due), due, "p1")
    assert any(isinstance(a, ChannelNote) and isinstance(a.event, Acknowledged)
               for a in ours.drain(CHANNEL))
