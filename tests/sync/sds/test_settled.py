"""SDS's bulk path for old fetched events (``SdsChannel.deliver_settled``) keeps SDS's
guarantees: fed a group's log in Recon's key order (by sender, then time), in batches, with the
events it refuses taken through ``receive_event``, a channel delivers every event exactly once
and each only after all of its dependencies, whether it keeps the whole log in memory or only a
window; and it delivers the same set as a channel taking every event the full way."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.sds import Delivered, SdsChannel, SdsConfig, SignedEvent, decode_event
from tests.sync.sds.helpers import CHANNEL, T0, of_type
from tests.sync.sds.test_window import Store, group_wires

CFG = SdsConfig(bloom_capacity=16, sync_history_size=4, delivered_window=64)
#: Long after the log was written: its events are past the live window.
LATER = T0 + 3600.0


def _group_log(senders: int, messages: int, seed: int) -> list[SignedEvent]:
    """A group where each member hears a random part of the others, so that histories cross
    senders and Recon's key order (sender first) often names dependencies not fetched yet."""
    return [decode_event(wire, verify_signature=False)
            for wire in group_wires(senders, messages, seed, hear=0.7)]


def _receiver(store: Store | None) -> SdsChannel:
    return SdsChannel(CHANNEL, "fresh", None, CFG, random.Random(99), LATER, False,
                      bounded=store is not None)


def _feed(ch: SdsChannel, batch: list[SignedEvent], now: float, store: Store | None
          ) -> list[str]:
    """What the node does with one fetched batch (``FetchedIngest.ingest_verified``): the
    channel's questions about its log for the whole batch are answered first
    (``reads_for``); then the bulk path's events are queued to the store, then each of the
    rest goes the full way and its deliveries are queued: no step asks anything more (a
    ``ReadDelivered`` returned would fail the test). The ids delivered, in delivery order."""
    batch = sorted(batch, key=lambda e: (e.lamport or 0, e.message_id))
    if store is not None:
        store.answer(ch, ch.layers.log.reads_for_steps((e.message_id, e.lamport, e.history_ids,
                                                 e.sender_id) for e in batch))
    done, full = ch.deliver_settled(
        [e.message_id for e in batch], [e.sender_id for e in batch],
        [e.lamport or 0 for e in batch], [e.history_ids for e in batch], now)
    order = [batch[i].message_id for i in done]
    if store is not None:
        store.ids.update(dict.fromkeys(order, 0))
    for i in full:
        assert ch.receive_event(batch[i], now) is None
        new = [d.message_id for d in of_type(ch.events(), Delivered)]
        if store is not None:
            store.ids.update(dict.fromkeys(new, 0))
        order += new
    return order


@settings(max_examples=40, deadline=None)
@given(senders=st.integers(2, 5), messages=st.integers(1, 150), seed=st.integers(0, 10_000),
       batch=st.integers(1, 60), bounded=st.booleans(), recent_share=st.sampled_from([0, 3]))
def test_bulk_path_delivers_each_event_once_after_its_dependencies(
    senders: int, messages: int, seed: int, batch: int, bounded: bool, recent_share: int,
) -> None:
    events = _group_log(senders, messages, seed)
    # Recon's order: by sender, then time.
    fetched = sorted(events, key=lambda e: (e.sender_id, e.lamport or 0))
    store = Store() if bounded else None
    ch = _receiver(store)
    # recent_share: some batches arrive while the log is still live (the full path).
    delivered: list[str] = []
    for n, start in enumerate(range(0, len(fetched), batch)):
        now = T0 + 2 if recent_share and n % recent_share == 0 else LATER
        delivered += _feed(ch, fetched[start : start + batch], now, store)
    # A missing dependency fetched later completes the waiting ones: all delivered in the end.
    assert len(delivered) == len(set(delivered)), "an event was delivered twice"
    assert set(delivered) == {e.message_id for e in events}
    position = {mid: i for i, mid in enumerate(delivered)}
    for e in events:
        for dep in e.history_ids:
            assert position[dep] < position[e.message_id], "delivered before a dependency"
    # The same set as the full protocol step for every event.
    reference = _receiver(None)
    for e in fetched:
        reference.receive_event(e, LATER)
    assert {d.message_id for d in of_type(reference.events(), Delivered)} == set(delivered)
    # A copy fetched again is neither delivered nor taken the full way again.
    if store is not None:
        store.answer(ch, ch.layers.log.reads_for_steps([(events[-1].message_id, events[-1].lamport,
                                        events[-1].history_ids, events[-1].sender_id)]))
    done, full = ch.deliver_settled([events[-1].message_id], [events[-1].sender_id],
                                    [events[-1].lamport or 0], [events[-1].history_ids], LATER)
    if not bounded:
        assert (done, full) == ([], [])


def test_recent_and_waited_for_events_take_the_full_step() -> None:
    events = _group_log(2, 20, 1)
    ch = _receiver(None)
    mids = [e.message_id for e in events]
    senders = [e.sender_id for e in events]
    lamports = [e.lamport or 0 for e in events]
    histories = [e.history_ids for e in events]
    # Within the live window (just after they were sent): nothing is taken in bulk.
    done, full = ch.deliver_settled(mids, senders, lamports, histories, T0 + 1)
    assert done == [] and full == list(range(len(events)))
    # Old: all taken, in order, the clock moved past them, and nothing went to the bloom.
    done, full = ch.deliver_settled(mids, senders, lamports, histories, LATER)
    assert done == list(range(len(events))) and full == []
    assert ch.layers.incoming.lamport >= max(lamports)
    assert all(ch.layers.log.contains(m) for m in mids)
