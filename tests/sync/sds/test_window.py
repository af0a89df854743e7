"""A channel that keeps only its newest delivered ids in memory and asks its driver for the rest
(``ReadDelivered`` returned, ``DeliveredRead`` fed back between steps) behaves exactly like
one that keeps the whole log: same deliveries in the same order, no duplicate delivered, old
events still recognised."""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.sds import (
    Delivered,
    DeliveredRead,
    ReadDelivered,
    SdsChannel,
    SdsConfig,
    decode_state,
    state_reads,
)
from sync.sds.state import encode_state
from tests.sync.sds.helpers import CHANNEL, T0, channel, of_type

CFG = SdsConfig(bloom_capacity=16, sync_history_size=4, delivered_window=64)


class Store:
    """The driver's side: every delivered id, as its database would hold it; it answers a
    channel's questions between steps."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.questions = 0

    def answer(self, ch: SdsChannel, read: ReadDelivered | None) -> None:
        if read is not None:
            self.questions += bool(read.ids)
            assert ch.layers.log.answer(read, [m for m in read.ids if m in self.ids])

    def found(self, read: ReadDelivered) -> DeliveredRead:
        """The answer to ``read``: which of its ids the log holds."""
        self.questions += bool(read.ids)
        return DeliveredRead(read, frozenset(m for m in read.ids if m in self.ids))

    def step(self, ch: SdsChannel, run: Callable[[], ReadDelivered | None]) -> None:
        """Run a receive; when it asks, check it did nothing and feed the answer back."""
        timer = ch.get_timer()
        read = run()
        if read is not None:
            # (Nothing to send either: only ``handle_timer`` makes messages besides ``send``.)
            assert ch.events() == [] and ch.get_timer() == timer
            # A second question for the same message would fail the test.
            assert ch.delivered_read(self.found(read)) is None

    def keep(self, ch: SdsChannel) -> list[Delivered]:
        delivered = of_type(ch.events(), Delivered)
        for d in delivered:
            assert d.message_id not in self.ids, "delivered twice"
            self.ids[d.message_id] = d.lamport
        return delivered


def _bounded(store: Store, i: int = 9) -> SdsChannel:
    return SdsChannel(CHANNEL, f"p{i}", None, CFG, random.Random(i), T0, False, bounded=True)


def group_wires(senders: int, messages: int, seed: int, hear: float = 1.0) -> list[bytes]:
    """Wires of a group where each member hears each other's message with probability ``hear``
    (everyone hears everyone by default), so histories cross senders."""
    rng = random.Random(seed)
    chans = [channel(i, config=CFG, signed=False) for i in range(senders)]
    wires: list[bytes] = []
    for n in range(messages):
        src = rng.randrange(senders)
        wire = chans[src].send(f"m{n}".encode(), T0 + n / 100)
        wires.append(wire)
        for j, other in enumerate(chans):
            # No draw when everyone hears: the default logs stay what they were.
            if j != src and (hear >= 1 or rng.random() < hear):
                other.receive(wire, T0 + n / 100)
                other.events()
    return wires


def _jumbled(wires: list[bytes], rng: random.Random, reach: int) -> list[bytes]:
    """Each wire moved up to ``reach`` places, and a fifth of them again much later."""
    keyed = sorted(range(len(wires)), key=lambda i: i + rng.uniform(0, reach))
    out = [wires[i] for i in keyed]
    for i in rng.sample(range(len(wires)), len(wires) // 5):
        out.insert(rng.randrange(len(out) + 1), wires[i])
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), reach=st.integers(1, 40))
def test_bounded_channel_delivers_like_the_whole_log(seed: int, reach: int) -> None:
    wires = _jumbled(group_wires(3, 220, seed), random.Random(seed), reach)
    whole = channel(9, config=CFG, signed=False)
    store = Store()
    bounded = _bounded(store)
    reference: list[str] = []
    got: list[str] = []
    for step, wire in enumerate(wires):
        now = T0 + 3 + step / 1000
        whole.receive(wire, now)
        reference.extend(d.message_id for d in of_type(whole.events(), Delivered))
        store.step(bounded, lambda: bounded.receive(wire, now))  # noqa: B023 (run at once)
        got.extend(d.message_id for d in store.keep(bounded))
        assert len(bounded.layers.log) <= CFG.delivered_window
    assert got == reference and len(set(got)) == 220
    assert bounded.layers.incoming.waiting_ids == whole.layers.incoming.waiting_ids == frozenset()


def test_old_duplicates_are_recognised_through_the_store() -> None:
    wires = group_wires(2, 300, 1)
    store = Store()
    ch = _bounded(store)
    for wire in wires:
        store.step(ch, lambda: ch.receive(wire, T0 + 5))  # noqa: B023
        store.keep(ch)
    assert len(store.ids) == 300 and len(ch.layers.log) == CFG.delivered_window
    before = store.questions
    for wire in wires[:50]:  # long out of the window: only the store knows them
        store.step(ch, lambda: ch.receive(wire, T0 + 6))  # noqa: B023
        assert store.keep(ch) == []
    assert store.questions > before
    oldest = next(iter(store.ids))
    # Asked up front, as the ingest path does.
    store.answer(ch, ch.layers.log.reads_for([oldest], {}))
    assert ch.layers.log.contains(oldest)
    # A fresh message naming recent ids needs no question at all.
    more = group_wires(2, 301, 1)[-1]
    asked = store.questions
    ch.receive(more, T0 + 7)
    assert [d.message_id for d in store.keep(ch)] and store.questions == asked


def test_restore_from_the_newest_part_of_the_log() -> None:
    wires = group_wires(2, 300, 2)
    store = Store()
    ch = _bounded(store)
    for wire in wires[:299]:
        store.step(ch, lambda: ch.receive(wire, T0 + 5))  # noqa: B023
        store.keep(ch)
    newest = sorted((lam, mid) for mid, lam in store.ids.items())[-CFG.delivered_window:]
    state = encode_state(ch.snapshot())
    asked = tuple(state_reads(decode_state(state), CFG.max_message_size))
    restored = SdsChannel.restore(
        state, None, log=[(mid, lam) for lam, mid in newest], config=CFG,
        rng=random.Random(9), now=T0 + 6, verify_signatures=False, bounded=True,
        log_truncated=True,
        delivered=(ReadDelivered(asked), [m for m in asked if m in store.ids]),
    )
    assert len(restored.layers.log) == CFG.delivered_window
    assert restored._bloom.to_bytes() == ch._bloom.to_bytes()
    for wire in wires[:20]:  # old events: recognised, not delivered again
        store.step(restored, lambda: restored.receive(wire, T0 + 7))  # noqa: B023
        assert store.keep(restored) == []
    # Counted though only the store knew them.
    assert restored.layers.stats.duplicates_received == 20
    store.step(restored, lambda: restored.receive(wires[299], T0 + 7))
    assert len(store.keep(restored)) == 1 and len(store.ids) == 300


def test_without_a_store_the_whole_log_stays_in_memory() -> None:
    wires = group_wires(2, 150, 3)
    ch = channel(9, config=CFG, signed=False)
    for wire in wires:
        ch.receive(wire, T0 + 5)
    assert len(ch.layers.log) == 150 and ch.layers.log.lookups == 0


def test_retrieval_hints_are_bounded_like_the_ids() -> None:
    sender = channel(0, config=CFG, signed=False)
    receiver = _bounded(Store())
    for n in range(300):
        wire = sender.send(f"h{n}".encode(), T0 + n / 100, retrieval_hint=f"hint{n}".encode())
        receiver.receive(wire, T0 + 3)  # in order: no question
    assert 0 < len(receiver.layers.history.hints) <= CFG.delivered_window
    assert len(sender.layers.history.hints) <= CFG.delivered_window
