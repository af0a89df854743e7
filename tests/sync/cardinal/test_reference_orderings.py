"""The Go reference consumer's ordering scenarios (delivery/ordering_test.go, TestReorg).

Blocks are built as the reference builds them: hash = the text ``<nonce><number>`` left-padded
with zeros to 32 bytes, weight = parent weight + 1 (0 for the first), one counted update, one
counted delete and a ``state/`` sub batch each. Every expectation is the list of updates the
reference emits, each as (added, removed), oldest first.
"""

from __future__ import annotations

import json
import random

import pytest

from sync.cardinal import (
    BlockPayload,
    BlockRef,
    ChainUpdated,
    Consumer,
    Producer,
    make_payload,
    make_sub_batch,
)
from tests.sync.cardinal.helpers import feed, router

Update = tuple[list[BlockPayload], list[BlockPayload]]


def go_hash(text: str) -> bytes:
    return text.encode().rjust(32, b"\x00")


def ref_block(number: int, nonce: int, parent: BlockPayload | None) -> BlockPayload:
    return make_payload(
        go_hash(f"{nonce}{number}"),
        number,
        parent.hash if parent else bytes(32),
        parent.weight + 1 if parent else 0,
        {f"foo/{number}/item": str(nonce).encode()},
        [f"foo/{number}/gone"],
        [
            make_sub_batch(
                "state/",
                go_hash(f"batch{number}{nonce}"),
                {f"state/{number}/addition": str(nonce).encode()},
                [f"state/{nonce}/whatever"],
            )
        ],
    )


a = ref_block(0, 0, None)
b = ref_block(1, 0, a)
c = ref_block(1, 1, a)
d = ref_block(2, 1, c)
e = ref_block(2, 0, b)
f = ref_block(3, 0, e)
g = ref_block(2, 2, b)
h = ref_block(3, 1, g)
i = ref_block(4, 0, h)
j = ref_block(4, 1, f)
k = ref_block(5, 0, i)
chain1 = [a]
chain2 = [a]
for n in range(1, 60):
    chain1.append(ref_block(n, 1, chain1[-1]))
    chain2.append(ref_block(n, 2, chain2[-1]))


def run(blocks: list[BlockPayload], start: BlockPayload, prod: Producer) -> list[Update]:
    consumer = Consumer(anchor=BlockRef(start.hash, start.number, start.weight))
    msgs = [m for block in blocks for m in prod.messages_for(block)]
    by_hash = {block.hash: block for block in [*blocks, start]}
    updates = [ev for ev in feed(consumer, msgs) if isinstance(ev, ChainUpdated)]
    assert consumer.stats.failed == 0
    return [([by_hash[x] for x in u.added], [by_hash[x] for x in u.removed]) for u in updates]


def names(updates: list[Update]) -> list[str]:
    label = {id(v): k for k, v in globals().items() if isinstance(v, BlockPayload)}
    return [
        " ".join([*("+" + label.get(id(x), x.hash.lstrip(b"\0").decode()) for x in add),
                  *("-" + label.get(id(x), x.hash.lstrip(b"\0").decode()) for x in rem)])
        for add, rem in updates
    ]


ABEFJ_K = [([b], []), ([e], []), ([f], []), ([j], []), ([g, h, i, k], [e, f, j])]

SCENARIOS: dict[str, tuple[list[BlockPayload], BlockPayload, list[Update]]] = {
    "ABCD": ([a, b, c, d], a, [([b], []), ([c, d], [b])]),
    "ABDC": ([a, b, d, c], a, [([b], []), ([c, d], [b])]),
    "ACDB": ([a, c, d, b], a, [([c], []), ([d], [])]),
    "ABCDEF": ([a, b, c, d, e, f], a, [([b], []), ([c, d], [b]), ([b, e, f], [c, d])]),
    "AEGFBHI": ([a, e, g, f, b, h, i], a, [([b, e, f], []), ([g, h, i], [e, f])]),
    "AEGFHIB": ([a, e, g, f, h, i, b], a, [([b, g, h, i], [])]),
    "AEFHIGB": ([a, e, f, h, i, g, b], a, [([b, g, h, i], [])]),
    "ABEFJHIKG": ([a, b, e, f, j, h, i, k, g], a, ABEFJ_K),
    "ABEFJGIKH": ([a, b, e, f, j, g, i, k, h], a, ABEFJ_K),
    "ABEFJGHIK": ([a, b, e, f, j, g, h, i, k], a, ABEFJ_K),
    "ABEFJIKHG": ([a, b, e, f, j, i, k, h, g], a, ABEFJ_K),
    "ABEFJGHKI": ([a, b, e, f, j, g, h, k, i], a, ABEFJ_K),
    "ADC": ([a, d, c], a, [([c, d], [])]),
    "start(c) ACDBEF": ([a, c, d, b, e, f], c, [([d], []), ([b, e, f], [c, d])]),
    "chain1[:50] -> chain2[:54] gaps filled late": (
        [*chain1[:50], *chain2[:25], *chain2[30:53],
         *[chain2[n] for n in (25, 26, 27, 28, 53, 29)]],
        a,
        [*(([x], []) for x in chain1[1:50]), (chain2[1:54], chain1[1:50])],
    ),
    "chain1[:6] -> chain2[5,6,3,4,1,2]": (
        [*chain1[:6], *[chain2[n] for n in (5, 6, 3, 4, 1, 2)]],
        a,
        [*(([x], []) for x in chain1[1:6]), (chain2[1:7], chain1[1:6])],
    ),
    "Startup Reorg": ([*chain1[:7], *chain2[:8]], chain1[6], [(chain2[1:8], chain1[1:7])]),
    "Startup Reorg OO": (
        [*chain1[:6], *chain2[:8], chain1[6], chain2[8]],
        chain1[6],
        [(chain2[1:9], chain1[1:7])],
    ),
}


@pytest.mark.parametrize("layout", ["syncnode", "go"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_reference_scenario(name: str, layout: str) -> None:
    blocks, start, expected = SCENARIOS[name]
    prod = Producer(router(), subbatch_chunk=2, layout=layout)
    assert names(run(blocks, start, prod)) == names(expected)


@pytest.mark.parametrize("seed", range(10))
def test_ordering_two_blocks_messages_shuffled(seed: int) -> None:
    """The reference's TestOrdering: the messages of B and of a child of B, shuffled together,
    from A: two blocks added, none removed."""
    child = ref_block(2, 0, b)
    msgs = [m for x in (b, child) for m in Producer(router(), layout="go").messages_for(x)]
    random.Random(seed).shuffle(msgs)
    consumer = Consumer(anchor=BlockRef(a.hash, a.number, a.weight))
    updates = [e for e in feed(consumer, msgs) if isinstance(e, ChainUpdated)]
    assert [x for u in updates for x in u.added] == [b.hash, child.hash]
    assert [x for u in updates for x in u.removed] == []


@pytest.mark.parametrize("out_of_order", [False, True])
def test_startup_reorg_after_restoring_saved_state(out_of_order: bool) -> None:
    """A consumer that followed chain1 to block 6 is saved and restored (as the node does after
    a restart); the producers then replay the recent history with a heavier branch. The reorg
    is one update with every block added and removed. Unlike a consumer started from a bare
    anchor (the reference's case, above), the restored one holds chain1's blocks, so in the
    out-of-order variant it takes chain2 as soon as chain2[7] outweighs the head, and chain2[8]
    then extends it."""
    prod = Producer(router(), subbatch_chunk=2)
    first = Consumer()
    feed(first, [m for x in chain1[:7] for m in prod.messages_for(x)])
    assert first.head.hash == chain1[6].hash
    restored = Consumer.restore(json.loads(json.dumps(first.export_state())))
    replay = (
        [*chain1[:6], *chain2[:8], chain1[6], chain2[8]]
        if out_of_order
        else [*chain1[:7], *chain2[:8]]
    )
    updates = [
        e for e in feed(restored, [m for x in replay for m in prod.messages_for(x)])
        if isinstance(e, ChainUpdated)
    ]
    reorg = ChainUpdated(tuple(x.hash for x in chain2[1:8]), tuple(x.hash for x in chain1[1:7]))
    extend = [ChainUpdated((chain2[8].hash,), ())] if out_of_order else []
    assert updates == [reorg, *extend]
    assert restored.head.hash == (chain2[8] if out_of_order else chain2[7]).hash
