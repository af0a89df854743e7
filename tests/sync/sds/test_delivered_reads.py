"""A bounded channel never reads storage inside a step: what only the store knows (is this old
id in the log?) it asks with a typed request (``ReadDelivered``), returned by ``receive``
before the step changes anything (the channel holds the message), or named up front
(``reads_for``, ``send_reads``, ``state_reads``); the driver feeds the answer back
(``DeliveredRead``: ``delivered_read`` runs the held message). On a fixed clock, with a dict
for the store."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import LocalProtocolError
from sync.gossip import SenderPolicy
from sync.ingest import IngestSpec, verify_wires
from sync.replication import ingest_batch, ingest_reads, order
from sync.sds import (
    Delivered,
    ReadDelivered,
    SdsChannel,
    SdsConfig,
    decode_event,
)
from sync.sds.delivered import STALE_ANSWERS, DeliveredNeeded
from sync.sds.state import encode_state
from sync.sds.waku import send_reads
from tests.sync.replication.test_ingest_core import history
from tests.sync.sds.helpers import CHANNEL, T0, channel, of_type
from tests.sync.sds.test_window import CFG, Store, group_wires

LATER = T0 + 3600.0


def _bounded(i: int = 9, config: SdsConfig = CFG) -> SdsChannel:
    return SdsChannel(CHANNEL, f"p{i}", None, config, random.Random(i), T0, False, bounded=True)


def _filled(store: Store, wires: list[bytes], now: float = T0 + 5) -> SdsChannel:
    """A bounded channel that delivered ``wires`` (more than its window) into ``store``."""
    ch = _bounded()
    for wire in wires:
        store.step(ch, lambda: ch.receive(wire, now))  # noqa: B023 (run at once)
        store.keep(ch)
    assert len(ch.layers.log) == CFG.delivered_window < len(store.ids)
    return ch


def _asks_and_does_nothing(ch: SdsChannel, run: Callable[[], object]) -> ReadDelivered:
    before = (encode_state(ch.snapshot()), ch.layers.log.entries(), ch.layers.incoming.lamport,
              ch.layers.stats.duplicates_received, ch.get_timer())
    try:  # a receive returns its request; a step asked up front only stops (a bug's guard)
        read = run()
    except DeliveredNeeded as need:
        read = need.read
    assert isinstance(read, ReadDelivered)
    # (Nothing to send either: only ``handle_timer`` makes messages besides ``send``.)
    assert (encode_state(ch.snapshot()), ch.layers.log.entries(), ch.layers.incoming.lamport,
            ch.layers.stats.duplicates_received, ch.get_timer()) == before
    assert ch.events() == []
    return read


def test_an_old_duplicate_is_a_question_then_a_duplicate() -> None:
    wires = group_wires(2, 200, 4)
    store = Store()
    ch = _filled(store, wires)
    old = decode_event(wires[0], verify_signature=False)
    read = _asks_and_does_nothing(ch, lambda: ch.receive(wires[0], T0 + 6))
    assert old.message_id in read.ids
    assert ch.delivered_read(store.found(read)) is None  # the held message ran
    assert of_type(ch.events(), Delivered) == [] and ch.layers.stats.duplicates_received == 1


def test_a_sync_naming_old_ids_asks_once_then_notes_nothing_missing() -> None:
    wires = group_wires(2, 200, 5)
    store = Store()
    ch = _filled(store, wires)
    # A sync whose history names the oldest events: only the store knows they are held.
    olds = [decode_event(w, verify_signature=False) for w in wires[:3]]
    peer = channel(0, config=CFG, signed=False)
    for wire in wires[:3]:
        peer.receive(wire, T0 + 1)
    sync = next(d for d in peer.handle_timer(T0 + 1000)
                if decode_event(d, verify_signature=False, max_size=1 << 20).is_sync)
    named = set(decode_event(sync, verify_signature=False, max_size=1 << 20).history_ids)
    read = _asks_and_does_nothing(ch, lambda: ch.receive(sync, T0 + 1000))
    assert named and named <= {e.message_id for e in olds} and named <= set(read.ids)
    assert ch.delivered_read(store.found(read)) is None
    assert ch.layers.incoming.missing_ids == frozenset()


def test_the_bulk_path_and_own_echo_check_ask_before_anything() -> None:
    wires = group_wires(2, 200, 6)
    store = Store()
    ch = _filled(store, wires)
    e = decode_event(wires[1], verify_signature=False)
    lamport = e.lamport
    assert lamport is not None
    _asks_and_does_nothing(ch, lambda: ch.deliver_settled(
        [e.message_id], [e.sender_id], [lamport], [e.history_ids], LATER))
    _asks_and_does_nothing(ch, lambda: ch.layers.log.contains(e.message_id, e.lamport))
    store.answer(ch, ch.layers.log.reads_for_steps([(e.message_id, e.lamport, e.history_ids,
                                              e.sender_id)]))
    assert ch.layers.log.contains(e.message_id, e.lamport)
    done, full = ch.deliver_settled([e.message_id], [e.sender_id], [lamport],
                                    [e.history_ids], LATER)
    assert (done, full) == ([], [])  # held (the store said so): a duplicate


def test_a_waku_send_asks_whether_the_payload_was_sent() -> None:
    cfg = SdsConfig(bloom_capacity=16, sync_history_size=4, delivered_window=64,
                    profile="waku")
    ch = _bounded(config=cfg)
    store = Store()
    for n in range(100):  # once the window is full, every send asks (as the node does)
        store.answer(ch, send_reads(ch.layers.log, [f"w{n}".encode()]))
        ch.send(f"w{n}".encode(), T0 + n)
        store.keep(ch)
    _asks_and_does_nothing(ch, lambda: ch.send(b"w0", T0 + 200))
    store.answer(ch, send_reads(ch.layers.log, [b"w0", b"new"]))
    with pytest.raises(Exception, match="sent already"):
        ch.send(b"w0", T0 + 200)
    ch.send(b"new", T0 + 201)
    assert [d.content for d in of_type(ch.events(), Delivered)] == [b"new"]


def test_an_answer_read_while_a_window_was_delivered_is_void() -> None:
    """"Not held" may be stale if a whole window came in while the driver read (one of them
    delivered and evicted meanwhile): the answer says so and keeps only "held"."""
    wires = group_wires(2, 400, 7)
    store = Store()
    ch = _filled(store, wires[:200])
    read = _asks_and_does_nothing(ch, lambda: ch.receive(wires[0], T0 + 6))
    for wire in wires[200:]:  # while the driver reads, the window fills again
        store.step(ch, lambda: ch.receive(wire, T0 + 6))  # noqa: B023
        store.keep(ch)
    assert not ch.layers.log.answer(read, [])
    assert isinstance(ch.receive(wires[0], T0 + 6), ReadDelivered)
    assert ch.layers.log.answer(read, [], force=True)


def test_a_held_message_asked_again_after_stale_answers_then_runs() -> None:
    """Through the channel's input: a stale answer brings the request back (asked from now,
    with what memory lacked added); the ``STALE_ANSWERS``-th in a row is used, and the held
    message runs (a duplicate: the store holds it)."""
    store = Store()
    ch = _filled(store, group_wires(2, 200, 8))
    wire = group_wires(2, 200, 8)[0]
    read = _asks_and_does_nothing(ch, lambda: ch.receive(wire, T0 + 6))

    def window_delivered(n: int) -> None:  # other inputs while the driver reads the store
        for i in range(CFG.delivered_window):
            ch.layers.log.add(f"other-{n}-{i}", 10**9 * (n + 1) + i)

    for n in range(1, STALE_ANSWERS):
        window_delivered(n)
        again = ch.delivered_read(store.found(read))
        assert again is not None and again.epoch == ch.layers.log.added
        assert set(read.ids) <= set(again.ids)
        read = again
    window_delivered(STALE_ANSWERS)
    assert ch.delivered_read(store.found(read)) is None  # used anyway: the message ran
    assert ch.layers.stats.duplicates_received == 1
    with pytest.raises(LocalProtocolError):  # nothing is held any more
        ch.delivered_read(store.found(read))


def test_an_unbounded_channel_never_asks() -> None:
    ch = channel(9, config=CFG, signed=False)
    log = ch.layers.log
    assert log.reads_for_steps([("x", 1, ("y",))]) is None and send_reads(log, [b"x"]) is None


@functools.cache
def _history(seed: int) -> list[bytes]:
    return history(260, seed)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), size=st.integers(1, 90), early=st.booleans())
def test_an_ingest_batch_answered_up_front_asks_nothing_more(
        seed: int, size: int, early: bool) -> None:
    """Whatever a batch holds (old and recent, duplicates, own echoes, events whose
    dependencies come later, more than a window), ``ingest_reads`` answered before
    ``ingest_batch`` covers every question its steps put: no ``DeliveredNeeded`` escapes
    mid-batch, and the batch delivers what a channel holding its whole log delivers."""
    wires = _history(seed % 3)  # signed, one second apart
    store = Store()
    ch = _filled(store, wires[:130], T0 + 300)
    whole = channel(9, config=CFG, signed=False)
    for wire in wires[:130]:
        whole.receive(wire, T0 + 300)
    whole.events()
    rng = random.Random(seed)
    part = rng.sample(wires, size)  # old ones (held), new ones, in Recon's order
    batch = verify_wires(IngestSpec(network_id=1), part)
    positions = order(batch)
    now = T0 + 300 if early else LATER
    policy = SenderPolicy("p9")
    for name, read in ingest_reads(batch, positions, {CHANNEL: ch}).items():
        assert name == CHANNEL
        store.answer(ch, read)
    out = ingest_batch(batch, part, positions, None, {CHANNEL: ch}, policy, now, 10**9)
    got = {r.message_id for r in out.records} | {
        d.message_id for d in of_type(ch.events(), Delivered)}
    ref = ingest_batch(batch, part, positions, None, {CHANNEL: whole}, policy, now, 10**9)
    expected = {r.message_id for r in ref.records} | {
        d.message_id for d in of_type(whole.events(), Delivered)}
    assert got == expected and not got & set(store.ids)
