"""Export and restore of channel state, with the bloom filter rebuilt from the log."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sync.errors import RemoteProtocolError
from sync.sds import (
    Delivered,
    SdsChannel,
    SdsConfig,
    decode_event,
    decode_state,
    decode_transmission,
    encode_state,
)
from sync.sds.state import STATE_MAGIC
from tests.sync.sds.helpers import CHANNEL, T0, channel, key, of_type

FIXTURES = Path(__file__).parent / "fixtures"

CFG = SdsConfig(resend_interval=10, t_min=30, t_max=120)


def _restore(ch: SdsChannel, i: int, delivered: list[Delivered]) -> SdsChannel:
    return SdsChannel.restore(
        encode_state(ch.snapshot()),
        key(i),
        log=[(d.message_id, d.lamport, d.sender_id) for d in delivered],
        cached_wires=[d.wire for d in delivered],
        config=CFG,
        rng=random.Random(i),
        now=T0 + 5,
    )


def test_round_trip_keeps_clock_buffers_repairs_and_filter() -> None:
    a, b = channel(0, config=CFG), channel(1, config=CFG)
    wires = [a.send(f"a{i}".encode(), T0 + i) for i in range(3)]
    a_log = of_type(a.events(), Delivered)
    for i in (0, 2):
        b.receive(wires[i], T0 + 3)
    b_log = of_type(b.events(), Delivered)
    a2, b2 = _restore(a, 0, a_log), _restore(b, 1, b_log)
    assert a2.layers.incoming.lamport == max(a.layers.incoming.lamport, int((T0 + 5) * 1000))
    assert a2.layers.log.entries() == a.layers.log.entries()
    assert a2.layers.outgoing.ids == a.layers.outgoing.ids
    assert b2.layers.incoming.waiting_ids == b.layers.incoming.waiting_ids
    assert b2.layers.incoming.missing_ids == b.layers.incoming.missing_ids
    assert b2.layers.repair.request_ids == b.layers.repair.request_ids
    assert a2._bloom.to_bytes() == a._bloom.to_bytes()
    # The next message of the restored sender carries the same history and filter.
    before = decode_transmission(a.send(b"next", T0 + 6))
    after = decode_transmission(a2.send(b"next", T0 + 6))
    assert before.event.message_id == after.event.message_id
    assert before.bloom_filter == after.bloom_filter
    # The restored receiver still completes the gap when the resend comes.
    for data in a2.handle_timer(T0 + 11):
        b2.receive(data, T0 + 12)
    assert b2.layers.log.entries() == a.layers.log.entries()[:3]


def test_restored_timers_and_repair_service() -> None:
    a, c = channel(0, config=CFG), channel(2, config=CFG)
    wires = [a.send(f"a{i}".encode(), T0) for i in range(3)]
    a_log = of_type(a.events(), Delivered)
    c.receive(wires[2], T0)
    c2 = _restore(c, 2, of_type(c.events(), Delivered))
    assert c2.get_timer() == c.get_timer()
    a2 = _restore(a, 0, a_log)
    when = c2.get_timer()
    assert when is not None
    for req in c2.handle_timer(when):
        a2.receive(req, when)
    for answer in a2.handle_timer(when):
        c2.receive(answer, when)
    assert c2.layers.log.entries() == a.layers.log.entries()


@pytest.mark.parametrize(
    "state",
    [b"", b"{", b"[]", b'{"v": 2}', b'{"v": 1}', b'{"v":1,"channel_id":"c","participant_id":3}',
     STATE_MAGIC + b"\xff\xff", STATE_MAGIC + b"\x22\x08" + b"\x00" * 8 + b"\x7f",
     b"\x00SDS\x03"],
)
def test_bad_state_is_a_remote_protocol_error(state: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        SdsChannel.restore(state, None, verify_signatures=False)


def test_state_from_a_valid_export_with_corrupted_wire() -> None:
    a, b = channel(0, config=CFG), channel(1, config=CFG)
    wires = [a.send(f"a{i}".encode(), T0 + i) for i in range(2)]
    b.receive(wires[1], T0 + 2)  # waits for a0: its wire is in b's state
    wire = decode_event(wires[1]).wire
    state = encode_state(b.snapshot())
    assert wire in state and CHANNEL.encode() in state
    with pytest.raises(RemoteProtocolError):
        SdsChannel.restore(state.replace(wire, wire[:-9]), key(1), config=CFG)
    # An outgoing wire given back for an id is checked against that id.
    a_log = of_type(a.events(), Delivered)
    with pytest.raises(RemoteProtocolError):
        SdsChannel.restore(encode_state(a.snapshot()), key(0), config=CFG,
                           log=[(d.message_id, d.lamport) for d in a_log],
                           outgoing_wires={a_log[0].message_id: a_log[1].wire})


def test_outgoing_messages_are_saved_by_reference() -> None:
    """Issue 31: our unacknowledged messages' wires are not in the saved state (the node's log
    holds them); restore takes them back by id, and one not given back is counted, not resent."""
    a = channel(0, config=CFG)
    big = [a.send(bytes([i]) * 100_000, T0 + i) for i in range(3)]
    a_log = of_type(a.events(), Delivered)
    state = encode_state(a.snapshot())
    assert len(state) < 2_000 < sum(map(len, big))
    log = [(d.message_id, d.lamport, d.sender_id) for d in a_log]
    given = {d.message_id: d.wire for d in a_log[:2]}
    a2 = SdsChannel.restore(state, key(0), log=log, outgoing_wires=given, config=CFG,
                            now=T0 + 5)
    assert a2.layers.outgoing.ids == frozenset(given) and a2.layers.stats.outgoing_unrestored == 1
    # ... found in cached_wires just as well.
    a3 = SdsChannel.restore(state, key(0), log=log, cached_wires=[d.wire for d in a_log],
                            config=CFG, now=T0 + 5)
    assert a3.layers.outgoing.ids == a.layers.outgoing.ids
    assert a3.layers.stats.outgoing_unrestored == 0
    resent = {decode_transmission(d).event.message_id for d in a3.handle_timer(T0 + 13)}
    assert resent == a.layers.outgoing.ids


def test_version_1_json_state_is_migrated() -> None:
    """A state saved by the JSON codec (fixture written by main 9e1104c) restores with every
    buffer, and the next save is version 2 binary, which restores to the same channel."""
    fixture = json.loads((FIXTURES / "state_v1.json").read_text())
    for i, role in ((0, "sender"), (1, "receiver")):
        old = fixture[role]
        assert old["state"].startswith('{"channel_id"') and '"v":1' in old["state"]
        log = [tuple(e) for e in old["log"]]
        ch = SdsChannel.restore(old["state"].encode(), key(i), log=log, config=CFG, now=T0 + 5)
        assert [list(e) for e in sorted((lam, mid) for mid, lam, _ in log)] == [
            list(e) for e in ch.layers.log.entries()]
        if role == "sender":
            assert sorted(ch.layers.outgoing.ids) == old["outgoing"]
        else:
            assert sorted(ch.layers.incoming.waiting_ids) == old["waiting"]
            assert sorted(ch.layers.incoming.missing_ids) == old["missing"]
            assert sorted(ch.layers.repair.request_ids) == old["repair"]
        new = encode_state(ch.snapshot())
        assert new.startswith(STATE_MAGIC) and not new.startswith(b"{")
        again = SdsChannel.restore(new, key(i), log=log, config=CFG, now=T0 + 5,
                                   outgoing_wires={mid: ch.layers.outgoing.entries[mid].wire
                                                   for mid in ch.layers.outgoing.ids})
        assert again.snapshot() == ch.snapshot()


def test_restore_delivers_waiting_messages_whose_dependencies_were_logged_meanwhile() -> None:
    a, b = channel(0, config=CFG), channel(1, config=CFG)
    wires = [a.send(f"a{i}".encode(), T0 + i) for i in range(3)]
    a_log = of_type(a.events(), Delivered)
    for i in (0, 2):
        b.receive(wires[i], T0 + 3)
    # The node fetched a1 by id (e.g. over Recon) and logged it before restarting.
    b2 = _restore(b, 1, a_log[:2])
    assert [e.message_id for e in of_type(b2.events(), Delivered)] == [a_log[2].message_id]
    assert b2.layers.incoming.waiting_ids == frozenset()
    assert b2.layers.incoming.missing_ids == frozenset()
    assert b2.layers.log.entries() == a.layers.log.entries()


def test_snapshot_is_a_public_value_that_round_trips_through_bytes() -> None:
    a, b = channel(0, config=CFG), channel(1, config=CFG)
    wires = [a.send(f"a{i}".encode(), T0 + i) for i in range(3)]
    b.receive(wires[2], T0 + 3)  # waits for a0, a1: missing, repair requests, timers
    for ch in (a, b):
        snap = ch.snapshot()
        assert decode_state(encode_state(snap)) == snap
        assert encode_state(snap) == encode_state(ch.snapshot())
    snap_b = b.snapshot()
    a_log = of_type(a.events(), Delivered)
    assert [decode_event(w.wire).message_id for w in snap_b.waiting] == [a_log[2].message_id]
    assert {m.ref.message_id for m in snap_b.missing} == b.layers.incoming.missing_ids
    assert all(m.lost_at is not None for m in snap_b.missing)
    assert {e.attempts for e in a.snapshot().outgoing} == {0}
    # Restoring gives back the same buffers (the clock may only move forward).
    restored = _restore(a, 0, a_log).snapshot()
    assert restored.outgoing == a.snapshot().outgoing and restored.heads == a.snapshot().heads


def test_resends_due_while_down_are_left_to_recon() -> None:
    """A restart after a burst's resend deadlines passed does not resend the burst (issue 37):
    those messages are left to the restart's Recon sessions (and stay in the repair cache); a
    deadline still ahead keeps its time."""
    a = channel(0, config=CFG)
    for i in range(3):
        a.send(f"a{i}".encode(), T0)  # resends due at T0 + 10
    a.send(b"late", T0 + 4)  # due at T0 + 14, still ahead at the restart
    delivered = of_type(a.events(), Delivered)
    restored = SdsChannel.restore(
        encode_state(a.snapshot()), key(0),
        log=[(d.message_id, d.lamport, d.sender_id) for d in delivered],
        cached_wires=[d.wire for d in delivered], config=CFG, rng=random.Random(0), now=T0 + 12)
    assert restored.handle_timer(T0 + 12) == []
    assert restored.layers.stats.outgoing_overdue == 3
    assert [decode_transmission(d).event.content for d in restored.handle_timer(T0 + 14)] == [
        b"late"]
    # (Past the interval a deferred resend would wait.)
    assert {decode_transmission(d).event.content
            for d in restored.handle_timer(T0 + 40)} <= {b"late", b""}
    assert restored.layers.outgoing.ids == {delivered[3].message_id}
    # A peer that asks for one by SDS-R is still answered.
    assert all(d.message_id in restored.layers.repair.cache for d in delivered[:3])


def test_a_node_that_reconciles_leaves_every_restored_resend_to_recon() -> None:
    """``restore(..., resend_restored=False)``, as the node restores: after a quick restart,
    the unacknowledged messages whose resend is still ahead are not resent either; they stay
    in the repair cache
    (a peer asking by SDS-R is answered) and the restart's Recon sessions carry them. Resent,
    a burst cut short by kill -9 went out again to every peer, up to ``max_resends`` times,
    while the peers fetched the same events by Recon."""
    a = channel(0, config=CFG)
    for i in range(3):
        a.send(f"a{i}".encode(), T0)  # resends due at T0 + 10
    delivered = of_type(a.events(), Delivered)
    restored = SdsChannel.restore(
        encode_state(a.snapshot()), key(0),
        log=[(d.message_id, d.lamport, d.sender_id) for d in delivered],
        cached_wires=[d.wire for d in delivered], config=CFG, rng=random.Random(0), now=T0 + 2,
        resend_restored=False)
    stats = restored.layers.stats
    assert stats.outgoing_left == 3 and stats.outgoing_overdue == 0
    for t in (T0 + 10, T0 + 20, T0 + 60):
        assert {decode_transmission(d).event.content
                for d in restored.handle_timer(t)} <= {b""}  # sync messages only
    assert restored.layers.outgoing.ids == set()
    assert all(d.message_id in restored.layers.repair.cache for d in delivered)
    # SDS on its own (the default) resends them at their deadline.
    kept = SdsChannel.restore(
        encode_state(a.snapshot()), key(0),
        log=[(d.message_id, d.lamport, d.sender_id) for d in delivered],
        cached_wires=[d.wire for d in delivered], config=CFG, rng=random.Random(0), now=T0 + 2)
    assert {decode_transmission(d).event.content
            for d in kept.handle_timer(T0 + 10)} == {b"a0", b"a1", b"a2"}
