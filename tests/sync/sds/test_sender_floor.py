"""The delivered-memory floor per sender (``DeliveredIndex(per_sender=True)``): a catch-up that
delivers one sender's stream after another's (Recon's key order: sender first) asks the store
nothing about the later senders' events, though they are far below the channel's floor; and the
floors never claim an id is new when it was delivered (nothing delivered twice), whatever the
order of deliveries, the number of senders (past the bound on kept floors) or a restart."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.sds import DeliveredIndex, SdsChannel, SdsConfig, SignedEvent, decode_event
from tests.sync.sds.helpers import CHANNEL
from tests.sync.sds.test_settled import CFG, LATER, _feed
from tests.sync.sds.test_window import Store, group_wires


@settings(max_examples=60, deadline=None)
@given(window=st.integers(1, 12), per_sender=st.booleans(),
       deliveries=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 200)), max_size=120),
       restart_at=st.none() | st.integers(0, 120))
def test_every_evicted_id_is_at_or_below_its_senders_floor(
    window: int, per_sender: bool, deliveries: list[tuple[int, int]], restart_at: int | None,
) -> None:
    """The invariant the index answers from: a delivered id not in memory has a Lamport time at
    or below ``floor_for`` its sender (and below the channel's floor), so an id above it that
    memory lacks is truly not delivered. Up to 31 senders against windows of 1-12 also drops
    floors past the bound (``window`` senders kept)."""
    index = DeliveredIndex(window, bounded=True, per_sender=per_sender)
    delivered: dict[str, tuple[int, str]] = {}
    for n, (sender_no, lamport) in enumerate(deliveries):
        if n == restart_at:
            # A restart loads the newest part of the log, senders unknown.
            entries = sorted((lam, mid) for mid, (lam, _) in delivered.items())
            index = DeliveredIndex(window, bounded=True, per_sender=per_sender)
            index.load(entries, truncated=True)
        mid, sender = f"m{n}", f"s{sender_no}"
        index.add(mid, lamport, sender)
        delivered[mid] = (lamport, sender)
        assert len(index) <= window
        for old, (lam, by) in delivered.items():
            if not index.in_memory(old):
                assert lam <= index.floor_for(by) <= index.floor


def test_floors_apply_only_where_ids_bind_sender_and_time() -> None:
    index = DeliveredIndex(1, bounded=True, per_sender=False)
    index.add("a", 100, "x")
    index.add("b", 5, "y")  # evicts a: the channel's floor is 100
    assert index.floor_for("y") == index.floor_for(None) == index.floor == 100
    index = DeliveredIndex(1, bounded=True, per_sender=True)
    index.add("a", 100, "x")
    index.add("b", 5, "y")
    assert (index.floor_for("x"), index.floor_for("y"), index.floor) == (100, -1, 100)
    # Where it matters to the channel: a checked id binds both, a waku id (the payload's
    # hash) does not.
    def evicted_floor(config: SdsConfig) -> int:
        log = SdsChannel(CHANNEL, "me", None, config, bounded=True).layers.log
        for n in range(config.delivered_window + 1):
            log.add(f"m{n}", 1000 + n, "x")
        return log.floor_for("y")

    assert evicted_floor(CFG) == -1
    assert evicted_floor(replace(CFG, profile="waku")) == 1000
    assert evicted_floor(replace(CFG, check_message_ids=False)) == 1000


def _streams(senders: int, messages: int, seed: int) -> list[SignedEvent]:
    """Senders that hear nothing of each other: each history names the sender's own earlier
    events, like the catch-up bench's log (``scripts/bench/catchup_log.py``)."""
    return [decode_event(w, verify_signature=False)
            for w in group_wires(senders, messages, seed, hear=0.0)]


def test_a_catch_up_in_key_order_asks_the_store_nothing_about_later_senders() -> None:
    """The 1,000,000-event catch-up's pattern (docs/bench/cluster.md): the first sender's
    stream raises the channel's floor past every other sender's events; with one floor each
    was a store question (a random probe into the 1M-row ``message_id`` index)."""
    events = _streams(4, 1200, 3)
    fetched = sorted(events, key=lambda e: (e.sender_id, e.lamport or 0))
    store = Store()
    ch = SdsChannel(CHANNEL, "fresh", None, CFG, random.Random(99), LATER, False, bounded=True)
    delivered: list[str] = []
    for start in range(0, len(fetched), 50):
        delivered += _feed(ch, fetched[start : start + 50], LATER, store)
    assert sorted(delivered) == sorted(e.message_id for e in events)
    assert ch.layers.log.floor > min(e.lamport or 0 for e in events)  # the window did move
    assert store.questions == 0


@settings(max_examples=30, deadline=None)
@given(senders=st.integers(2, 6), messages=st.integers(70, 300), seed=st.integers(0, 10_000),
       batch=st.integers(1, 80), hear=st.sampled_from([0.0, 0.7]),
       again=st.lists(st.integers(0, 10_000), max_size=30))
def test_refetched_events_are_never_delivered_twice(
    senders: int, messages: int, seed: int, batch: int, hear: float, again: list[int],
) -> None:
    """Fetched in key order in batches, with events fetched again later (a second session, a
    peer's echo): each is delivered once, and the set is the whole log."""
    events = _streams(senders, messages, seed) if hear == 0.0 else [
        decode_event(w, verify_signature=False)
        for w in group_wires(senders, messages, seed, hear=hear)]
    fetched = sorted(events, key=lambda e: (e.sender_id, e.lamport or 0))
    rng = random.Random(seed)
    for n in again:
        fetched.insert(rng.randrange(n % len(fetched), len(fetched) + 1),
                       fetched[n % len(fetched)])
    store = Store()
    ch = SdsChannel(CHANNEL, "fresh", None, CFG, random.Random(99), LATER, False, bounded=True)
    delivered: list[str] = []
    for start in range(0, len(fetched), batch):
        chunk = list({e.message_id: e for e in fetched[start : start + batch]}.values())
        delivered += _feed(ch, chunk, LATER, store)
    assert len(delivered) == len(set(delivered)), "an event was delivered twice"
    assert set(delivered) == {e.message_id for e in events}


def test_a_copy_evicted_by_its_own_batch_is_not_delivered_again() -> None:
    """An event held in memory when its batch starts, evicted by deliveries earlier in that
    batch (lower Lamport times, another sender) before its turn, is still known delivered."""
    events = _streams(2, 400, 5)
    first, second = sorted({e.sender_id for e in events})
    ours = [e for e in events if e.sender_id == first]
    theirs = [e for e in events if e.sender_id == second]
    store = Store()
    ch = SdsChannel(CHANNEL, "fresh", None, CFG, random.Random(99), LATER, False, bounded=True)
    window = CFG.delivered_window
    delivered = _feed(ch, ours[:window], LATER, store)  # memory full: ours[0] is next out
    # The other sender's first events are older than ours[0]: delivered before it, they evict
    # it; its copy comes after them in the batch's causal order.
    older = [e for e in theirs if (e.lamport or 0) < (ours[0].lamport or 0)]
    assert older
    delivered += _feed(ch, [*older, ours[0]], LATER, store)
    assert len(delivered) == len(set(delivered)), "an event was delivered twice"
