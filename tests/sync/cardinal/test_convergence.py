"""Hypothesis: any delivery order, with duplicates and mixed producer layouts, ends at a head of
the greatest weight with the producers' contents; weight-0 chains advance block by block."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.cardinal import (
    BlockApplied,
    BlockFailed,
    BlockPayload,
    BlockReverted,
    ChainUpdated,
    Consumer,
    Producer,
    make_payload,
    make_sub_batch,
)
from tests.sync.cardinal.helpers import feed, h, messages, router


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


def check_head(consumer: Consumer, blocks: list[BlockPayload]) -> None:
    """The head rule's convergence claim for weights that grow along every chain: the head has
    the greatest weight, and is THE heaviest block when only one block has that weight."""
    top = max(b.weight for b in blocks)
    assert consumer.head.weight == top
    heaviest = [b for b in blocks if b.weight == top]
    if len(heaviest) == 1:
        assert consumer.head.hash == heaviest[0].hash


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
    delivery = msgs + [m for m in msgs if rng.random() < dup]
    rng.shuffle(delivery)
    consumer = Consumer()
    events = feed(consumer, delivery)
    check_head(consumer, blocks)
    # The events replay to exactly the canonical chain, with the producers' contents.
    assert list(replay(events).values()) == consumer.canonical_blocks()
    by_hash = {b.hash: b for b in blocks}
    assert all(by_hash[b.hash] == b for b in consumer.canonical_blocks())
    # Every head change is summarised once, after its per-block events.
    updates = [e for e in events if isinstance(e, ChainUpdated)]
    assert sum(len(u.added) for u in updates) == sum(isinstance(e, BlockApplied) for e in events)


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
        events.extend(e for e in consumer.events() if not isinstance(e, ChainUpdated))
        peak = max(peak, len(consumer.canonical_blocks()))
    # Only BlockApplied events, each block once, in chain order.
    assert [e.block if isinstance(e, BlockApplied) else e for e in events] == blocks
    assert consumer.head.hash == blocks[-1].hash
    assert peak <= threshold + 1
    assert consumer.canonical_blocks() == blocks[-(threshold + 1) :]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 100), min_size=1, max_size=6),
    st.integers(1, 3),
    st.randoms(use_true_random=False),
    st.floats(0, 0.5),
)
def test_two_producers_with_different_chunking_mixed_in_any_order(
    shape: list[int], chunk: int, rng: random.Random, dup: float
) -> None:
    """Our producer and one in the Go reference's layout publish the same blocks; a consumer
    hears both, interleaved, duplicated, in any order, and assembles every block."""
    blocks = build_tree(shape, len(shape) * 7 + chunk)
    ours = messages(*blocks, prod=Producer(router(), subbatch_chunk=chunk))
    go = messages(*blocks, prod=Producer(router(), layout="go"))
    assert any(m not in ours for m in go)  # the layouts really differ (sub batch chunking)
    delivery = [(m, "ours") for m in ours] + [(m, "go") for m in go]
    delivery += [x for x in delivery if rng.random() < dup]
    rng.shuffle(delivery)
    consumer = Consumer()
    events = []
    for m, peer in delivery:
        consumer.receive(m.key, m.value, m.channel, peer)
        events.extend(consumer.events())
    assert consumer.stats.failed == 0
    assert not [e for e in events if isinstance(e, BlockFailed)]
    check_head(consumer, blocks)
    by_hash = {b.hash: b for b in blocks}
    applied = [e.block for e in events if isinstance(e, BlockApplied)]
    assert applied and all(by_hash[b.hash] == b for b in applied)
    assert list(replay(events).values()) == consumer.canonical_blocks()


def zero_weight_chain(count: int, hashes: list[bytes]) -> list[BlockPayload]:
    out: list[BlockPayload] = []
    for n in range(count):
        parent = out[-1].hash if out else bytes(32)
        out.append(make_payload(hashes[n], n + 1, parent, 0, {f"foo/{n}": b"x"}))
    return out


@pytest.mark.parametrize("hash_order", ["increasing", "random"])
def test_weight_zero_chain_applies_each_block_as_it_arrives(hash_order: str) -> None:
    rng = random.Random(6)
    hashes = [
        (n + 1).to_bytes(32, "big") if hash_order == "increasing" else rng.randbytes(32)
        for n in range(6)
    ]
    blocks = zero_weight_chain(6, hashes)
    consumer = Consumer()
    per_block = []
    for b in blocks:
        per_block.append(
            [e.block.number for e in feed(consumer, messages(b)) if isinstance(e, BlockApplied)]
        )
    assert per_block == [[1], [2], [3], [4], [5], [6]]
    assert consumer.head.hash == blocks[-1].hash


def test_weight_zero_chain_memory_is_bounded() -> None:
    rng = random.Random(3000)
    blocks = zero_weight_chain(3000, [rng.randbytes(32) for _ in range(3000)])
    consumer = Consumer(reorg_threshold=100)
    peak = 0
    for b in blocks:
        feed(consumer, messages(b))
        peak = max(peak, consumer.pending_count())
    assert consumer.head.hash == blocks[-1].hash
    assert peak <= 101
