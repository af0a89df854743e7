"""Hypothesis: any delivery order, with duplicates, ends at the same head with the same blocks."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.cardinal import (
    BlockApplied,
    BlockPayload,
    BlockReverted,
    Consumer,
    make_payload,
    make_sub_batch,
)
from tests.sync.cardinal.helpers import feed, h, messages, producer


def build_tree(shape: list[int], seed: int) -> list:  # type: ignore[type-arg]
    """Blocks whose parent is chosen by ``shape`` (an index into earlier blocks), genesis first."""
    rng = random.Random(seed)
    blocks: list[BlockPayload] = []
    for i, pick in enumerate([0, *shape]):
        parent = blocks[pick % len(blocks)] if blocks else None
        number = parent.number + 1 if parent else 0
        updates = {f"foo/{i}/{k}": bytes([rng.randrange(256)]) for k in range(rng.randrange(4))}
        updates[f"inline/{i}"] = b"x"
        subs = []
        if rng.random() < 0.5:
            subs.append(
                make_sub_batch("state/", h(f"sb{i}"), {f"s/{i}": b"1", f"s/{i}b": b"2"}, ["d"])
            )
        blocks.append(
            make_payload(
                h(f"b{i:02d}"),
                number,
                parent.hash if parent else bytes(32),
                parent.weight + 1 if parent else 0,
                updates,
                [f"foo/{i}/gone"] if rng.random() < 0.5 else [],
                subs,
            )
        )
    return blocks


def replay(events: list) -> dict:  # type: ignore[type-arg]
    """The canonical chain that the applied / reverted events describe."""
    chain: dict = {}  # type: ignore[type-arg]
    for e in events:
        if isinstance(e, BlockApplied):
            chain[e.block.hash] = e.block
        elif isinstance(e, BlockReverted):
            del chain[e.hash]
    return chain


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 100), min_size=1, max_size=7),
    st.integers(0, 2**32),
    st.randoms(use_true_random=False),
    st.floats(0, 0.5),
)
def test_any_delivery_order_converges(
    shape: list[int], seed: int, rng: random.Random, dup: float
) -> None:
    blocks = build_tree(shape, seed)
    msgs = messages(*blocks)
    reference = Consumer()
    ref_events = feed(reference, msgs)
    delivery = msgs + [m for m in msgs if rng.random() < dup]
    rng.shuffle(delivery)
    consumer = Consumer()
    events = feed(consumer, delivery)
    assert consumer.head == reference.head
    assert consumer.canonical_blocks() == reference.canonical_blocks()
    # The events replay to exactly the canonical chain, with the producers' contents.
    assert list(replay(events).values()) == consumer.canonical_blocks()
    assert list(replay(ref_events).values()) == reference.canonical_blocks()
    by_hash = {b.hash: b for b in blocks}
    assert all(by_hash[b.hash] == b for b in consumer.canonical_blocks())
    # The head is the heaviest block, ties to the smallest hash.
    best = min(blocks, key=lambda b: (-b.weight, b.hash))
    assert consumer.head.hash == best.hash


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(0, 5), st.randoms(use_true_random=False), st.floats(0, 0.5))
def test_a_single_chain_is_applied_once_in_order_with_bounded_memory(
    length: int, threshold: int, rng: random.Random, dup: float
) -> None:
    blocks = build_tree([i for i in range(length - 1)], length)  # block i + 1 extends block i
    msgs = messages(*blocks)
    delivery = msgs + [m for m in msgs if rng.random() < dup]
    rng.shuffle(delivery)
    consumer = Consumer(reorg_threshold=threshold)
    peak = 0
    events = []
    for m in delivery:
        consumer.receive(m.key, m.value, m.channel)
        events.extend(consumer.events())
        peak = max(peak, len(consumer.canonical_blocks()))
    # Only BlockApplied events, each block once, in chain order.
    assert [e.block if isinstance(e, BlockApplied) else e for e in events] == blocks
    assert consumer.head.hash == blocks[-1].hash
    assert peak <= threshold + 1
    assert consumer.canonical_blocks() == blocks[-(threshold + 1) :]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 100), min_size=1, max_size=6),
    st.randoms(use_true_random=False),
    st.randoms(use_true_random=False),
)
def test_two_redundant_producers_two_consumers_same_head(
    shape: list[int], rng1: random.Random, rng2: random.Random
) -> None:
    """Two producers publish the same blocks; each consumer hears both, in its own order."""
    blocks = build_tree(shape, len(shape))
    from_p1, from_p2 = messages(*blocks, prod=producer()), messages(*blocks, prod=producer())
    assert from_p1 == from_p2  # byte-identical, so the copies are plain duplicates
    heads = []
    for rng in (rng1, rng2):
        delivery = from_p1 + from_p2
        rng.shuffle(delivery)
        consumer = Consumer()
        feed(consumer, delivery)
        assert consumer.stats.failed == 0
        heads.append((consumer.head, consumer.canonical_blocks()))
    assert heads[0] == heads[1]
