"""Shared builders for the Cardinal tests: payloads, a producer, delivery of messages."""

from __future__ import annotations

import hashlib
import random

from sync.cardinal import (
    BlockApplied,
    BlockPayload,
    BlockRef,
    BlockReverted,
    Consumer,
    ConsumerEvent,
    PrefixRouter,
    Producer,
    RoutedMessage,
    make_payload,
    make_sub_batch,
)

ROUTES = {"foo/": "foo", "bar/[^/]+/baz/": "bar", "state/": "state"}


def router() -> PrefixRouter:
    return PrefixRouter(ROUTES, "default")


def producer() -> Producer:
    return Producer(router(), subbatch_chunk=2)


def h(name: str) -> bytes:
    """A 32-byte hash whose order follows ``name`` (so tie-breaks are easy to predict)."""
    return name.encode().ljust(32, b"\x00")


def block(
    name: str, number: int, parent: BlockPayload | None, *, nonce: int = 0, extra: int = 0
) -> BlockPayload:
    """A block with a counted update and delete, an inline value, a bar/ key and a sub batch."""
    updates = {
        f"foo/{number}/item": f"{name}{nonce}".encode(),
        f"bar/{number}/baz/x": b"bx",
        f"plain/{name}": b"inline",
    }
    updates.update({f"foo/{number}/k{i}": bytes([i % 256]) * 3 for i in range(extra)})
    sub = make_sub_batch(
        "state/",
        hashlib.sha256(f"batch-{name}-{nonce}".encode()).digest(),
        {f"state/{number}/add{i}": f"{name}{i}".encode() for i in range(3)},
        [f"state/{nonce}/gone"],
    )
    return make_payload(
        h(name),
        number,
        parent.hash if parent else bytes(32),
        (parent.weight + 1) if parent else 0,
        updates,
        [f"foo/{number}/gone", f"plain-del/{name}"],
        [sub],
    )


def messages(*blocks: BlockPayload, prod: Producer | None = None) -> list[RoutedMessage]:
    prod = prod or producer()
    return [m for b in blocks for m in prod.messages_for(b)]


def shuffled(
    msgs: list[RoutedMessage], rng: random.Random, dup_rate: float = 0.0
) -> list[RoutedMessage]:
    out = list(msgs)
    out.extend(m for m in msgs if rng.random() < dup_rate)
    rng.shuffle(out)
    return out


def feed(consumer: Consumer, msgs: list[RoutedMessage]) -> list[ConsumerEvent]:
    events: list[ConsumerEvent] = []
    for m in msgs:
        consumer.receive(m.key, m.value, m.channel)
        events.extend(consumer.events())
    return events


def anchor_of(b: BlockPayload) -> BlockRef:
    return BlockRef(b.hash, b.number, b.weight)


def chain_log(events: list[ConsumerEvent]) -> list[str]:
    """Events as ``+name`` / ``-name`` using the first byte of the hash."""
    out = []
    for e in events:
        if isinstance(e, BlockApplied):
            out.append("+" + e.block.hash.rstrip(b"\x00").decode())
        elif isinstance(e, BlockReverted):
            out.append("-" + e.hash.rstrip(b"\x00").decode())
    return out
