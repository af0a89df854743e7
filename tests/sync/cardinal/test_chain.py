"""Chain head: reorg orderings (weight = parent weight + 1, A the root), deep reorgs, memory."""

from __future__ import annotations

import random

import pytest

from sync.cardinal import (
    BlockApplied,
    BlockReverted,
    Consumer,
    ReorgFinished,
    ReorgIgnored,
    ReorgStarted,
    make_payload,
)
from tests.sync.cardinal.helpers import anchor_of, block, chain_log, feed, h, messages, producer

A = block("A", 0, None)
B = block("B", 1, A)
C = block("C", 1, A)
D = block("D", 2, C)
E = block("E", 2, B)
F = block("F", 3, E)
G = block("G", 2, B)
H = block("H", 3, G)
I = block("I", 4, H)  # noqa: E741
TREE = {b.hash.rstrip(b"\x00").decode(): b for b in (A, B, C, D, E, F, G, H, I)}

# Equal weights go to the smaller hash, so B beats C and D beats E at equal weight.
CASES = {
    "ABCD": ["+B", "-B", "+C", "+D"],
    "ABDC": ["+B", "-B", "+C", "+D"],
    "ACDB": ["+C", "+D"],
    "ABCDEF": ["+B", "-B", "+C", "+D", "-D", "-C", "+B", "+E", "+F"],
    "AEGFBHI": ["+B", "+E", "+F", "-F", "-E", "+G", "+H", "+I"],
    "ADC": ["+C", "+D"],  # a child arriving before its parent
}


@pytest.mark.parametrize("order", sorted(CASES))
def test_reorg_orderings(order: str) -> None:
    consumer = Consumer(anchor=anchor_of(A))
    events = feed(consumer, messages(*(TREE[name] for name in order)))
    assert chain_log(events) == CASES[order]
    final = CASES[order][-1][1]
    assert consumer.head.hash == h(final)
    # Applied blocks carry the complete content.
    applied = [e.block for e in events if isinstance(e, BlockApplied)]
    assert all(b == TREE[b.hash.rstrip(b"\x00").decode()] for b in applied)


@pytest.mark.parametrize("order", sorted(CASES))
def test_reorg_orderings_with_interleaved_messages(order: str) -> None:
    # Messages of all blocks interleaved at random: the final head and chain are the same.
    rng = random.Random(order)
    msgs = messages(*(TREE[name] for name in order))
    rng.shuffle(msgs)
    consumer = Consumer(anchor=anchor_of(A))
    feed(consumer, msgs)
    assert consumer.head.hash == h(CASES[order][-1][1])


def test_abcdef_re_adds_a_reverted_block_with_its_content() -> None:
    consumer = Consumer(anchor=anchor_of(A))
    events = feed(consumer, messages(A, B, C, D, E, F))
    reapplied = [e.block for e in events if isinstance(e, BlockApplied) and e.block.hash == h("B")]
    assert reapplied == [B, B]
    assert [b.hash for b in consumer.canonical_blocks()] == [h("A"), h("B"), h("E"), h("F")]


def test_genesis_mode_without_anchor() -> None:
    consumer = Consumer()
    events = feed(consumer, messages(C, A, D))
    assert chain_log(events) == ["+A", "+C", "+D"]


def test_child_with_number_not_above_parent_is_rejected() -> None:
    bad = make_payload(h("X"), 1, D.hash, 9, {"foo/1/x": b"1"})
    consumer = Consumer(anchor=anchor_of(A))
    events = feed(consumer, messages(C, D, bad))
    assert chain_log(events) == ["+C", "+D"]
    assert any(getattr(e, "reason", "") == "block number not above its parent's" for e in events)


def linear(prefix: str, start: int, count: int, parent=None, weight_step: int = 1):  # type: ignore[no-untyped-def]
    out = []
    for i in range(start, start + count):
        b = make_payload(
            h(f"{prefix}{i:03d}"),
            i,
            parent.hash if parent else bytes(32),
            (parent.weight + weight_step) if parent else 0,
            {f"foo/{i}": prefix.encode()},
        )
        out.append(b)
        parent = b
    return out


def test_memory_is_bounded_and_evictions_are_counted() -> None:
    main = linear("m", 0, 60)
    side = linear("s", 5, 3, parent=main[4])  # a light fork that falls behind
    consumer = Consumer(reorg_threshold=8)
    feed(consumer, messages(*main[:10], *side, *main[10:]))
    assert consumer.head.hash == main[-1].hash
    assert len(consumer.canonical_blocks()) <= 9
    assert consumer.pending_count() <= 9
    assert consumer.stats.evicted_blocks == 3
    # A fork deeper than the threshold is not followed from ordinary messages.
    deep = linear("d", 20, 50, parent=main[19], weight_step=2)
    feed(consumer, messages(*deep))
    assert consumer.head.hash == main[-1].hash
    assert consumer.stats.too_old > 0


def test_pending_blocks_far_behind_the_head_are_evicted() -> None:
    main = linear("m", 0, 40)
    consumer = Consumer(reorg_threshold=4)
    stray = make_payload(h("stray"), 3, h("nowhere"), 100, {"foo/s": b"1", "foo/t": b"2"})
    stray_msgs = messages(stray)
    # Only part of the stray block arrives: it stays pending until the head moves past it.
    feed(consumer, [m for m in stray_msgs if not m.key.startswith(b"\x03" + stray.hash + b"foo/t")])
    assert consumer.pending_count() == 1
    feed(consumer, messages(*main))
    assert consumer.stats.evicted_pending == 1
    assert consumer.pending_count() == len(consumer.canonical_blocks()) == 5


def test_deep_reorg_through_reorg_messages() -> None:
    prod = producer()
    old = linear("o", 0, 12)
    consumer = Consumer(reorg_threshold=3)
    feed(consumer, messages(*old, prod=prod))
    assert consumer.head.hash == old[-1].hash
    new = linear("n", 5, 10, parent=old[4])
    reorg = prod.reorg_messages(old[4].hash, 4, new)
    assert all(m.channel == reorg[0].channel for m in reorg)
    events = feed(consumer, reorg)
    assert isinstance(events[0], ReorgStarted)
    reverted = [e for e in events if isinstance(e, BlockReverted)]
    assert [e.number for e in reverted] == [11, 10, 9, 8, 7, 6, 5]
    assert all(e.block is not None for e in reverted if e.number >= 8)
    assert all(e.block is None for e in reverted if e.number < 8)
    assert [e.block.hash for e in events if isinstance(e, BlockApplied)] == [b.hash for b in new]
    assert isinstance(events[-1], ReorgFinished)
    assert consumer.head.hash == new[-1].hash
    # Late copies of the removed chain, a repeated reorg and the closed channel change nothing.
    again = feed(consumer, messages(*old[8:], prod=prod) + reorg)
    assert chain_log(again) == []
    assert consumer.head.hash == new[-1].hash
    # The new chain keeps growing through ordinary messages.
    more = linear("n", 15, 2, parent=new[-1])
    assert [
        e.block.hash for e in feed(consumer, messages(*more)) if isinstance(e, BlockApplied)
    ] == [b.hash for b in more]


def test_reorg_to_a_block_still_in_the_tree() -> None:
    prod = producer()
    consumer = Consumer(anchor=anchor_of(A), reorg_threshold=10)
    feed(consumer, messages(B, E, F, prod=prod))
    events = feed(consumer, prod.reorg_messages(B.hash, 1, [G]))
    assert chain_log(events) == ["-F", "-E", "+G"]
    assert consumer.head.hash == G.hash
    # E and F were removed by the reorg: resending them does not bring them back.
    assert chain_log(feed(consumer, messages(E, F, prod=prod))) == []


def test_reorg_to_an_unknown_ancestor_is_ignored() -> None:
    prod = producer()
    consumer = Consumer(anchor=anchor_of(A))
    feed(consumer, messages(B))
    events = feed(consumer, prod.reorg_messages(h("Z"), 7, []))
    assert isinstance(events[0], ReorgIgnored)
    assert consumer.head.hash == B.hash


def test_export_and_restore_state() -> None:
    consumer = Consumer(anchor=anchor_of(A), reorg_threshold=2)
    feed(consumer, messages(B, C, D, E, F, G))
    state = consumer.export_state()
    restored = Consumer.restore(state, reorg_threshold=2)
    assert restored.head == consumer.head
    assert restored.canonical_blocks() == consumer.canonical_blocks()
    assert restored.events() == []
    # Both continue identically.
    tail = messages(H, I)
    assert chain_log(feed(restored, tail)) == chain_log(feed(consumer, tail))
    assert restored.head == consumer.head


def test_state_survives_json_and_genesis_mode() -> None:
    import json

    from sync.errors import RemoteProtocolError

    main = linear("m", 0, 6)
    consumer = Consumer(reorg_threshold=10)
    feed(consumer, messages(*main[:3]))
    state = json.loads(json.dumps(consumer.export_state()))
    restored = Consumer.restore(state, reorg_threshold=10)
    assert restored.head == consumer.head
    assert chain_log(feed(restored, messages(*main))) == [
        "+" + b.hash.rstrip(b"\x00").decode() for b in main[3:]
    ]
    with pytest.raises(RemoteProtocolError):
        Consumer.restore({"version": 1, "history": [{"hash": 5}]})
    with pytest.raises(RemoteProtocolError):
        Consumer.restore({"version": 99})
