"""A group built only from the membership cores (address book, peer exchange answers,
connection manager) meshes from a star of joins, and losing any minority leaves the rest
connected: a deterministic simulation on a fixed clock, over hypothesis-chosen groups."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.membership import AddressBook, BookLimits, ConnectionManager, ConnLimits

PX_RECORDS = 16


class Group:
    def __init__(self, size: int, low: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ids = [f"12D3KooWnode{i:03d}" for i in range(size)]
        self.addr = {p: f"/ip4/198.{18 + i % 2}.{i}.1/tcp/4001" for i, p in enumerate(self.ids)}
        limits = BookLimits(per_bucket=64, per_source=32)
        self.books = {p: AddressBook(p, limits) for p in self.ids}
        self.conns = {p: ConnectionManager(ConnLimits(low_watermark=low, high_watermark=32,
                                                      grace_s=0)) for p in self.ids}
        self.alive = set(self.ids)
        self.now = 0.0

    def record(self, peer: str) -> tuple[str, list[str], int, bytes]:
        return peer, [self.addr[peer]], 1, b"signed"

    def connect(self, a: str, b: str) -> bool:
        """``a`` dials ``b``: on success both note it and ``a`` asks ``b`` for records."""
        if b not in self.alive:
            self.books[a].dial_failed(b, self.now)
            return False
        for x, y, inbound in ((a, b, False), (b, a, True)):
            self.conns[x].opened(y, None, inbound, self.now)
            self.conns[x].spoke(y)
        self.books[a].learn(b, self.addr[b], self.now)
        self.exchange(a, b)
        return True

    def exchange(self, asker: str, answerer: str) -> None:
        """Peer exchange: the asker's own record one way, records the other knows back."""
        self.books[answerer].offer(*self.record(asker), source=asker, now=self.now)
        connected = set(self.conns[answerer].conns)
        shared = [e.peer_id for e in self.books[answerer].shareable(PX_RECORDS, connected, self.rng)
                  if e.peer_id != asker][: PX_RECORDS - 1]
        for peer in [answerer, *shared]:
            self.books[asker].offer(*self.record(peer), source=answerer, now=self.now)

    def kill(self, peers: set[str]) -> None:
        self.alive -= peers
        for peer in self.alive:
            for gone in peers:
                self.conns[peer].closed(gone)

    def round(self) -> None:
        self.now += 10.0
        for peer in sorted(self.alive):
            plan = self.conns[peer].housekeeping(self.now)
            exclude = set(self.conns[peer].conns)
            for entry in self.books[peer].candidates(self.now, exclude, plan.dial, self.rng):
                self.connect(peer, entry.peer_id)
            neighbours = sorted(self.conns[peer].conns)
            if neighbours:
                self.exchange(peer, self.rng.choice(neighbours))

    def connected_components(self) -> int:
        seen: set[str] = set()
        parts = 0
        for start in self.alive:
            if start in seen:
                continue
            parts += 1
            todo = [start]
            while todo:
                peer = todo.pop()
                if peer not in seen:
                    seen.add(peer)
                    todo += [p for p in self.conns[peer].conns if p in self.alive]
        return parts


@settings(max_examples=30, deadline=None)
@given(size=st.integers(3, 30), low=st.integers(4, 8), seed=st.integers(0, 10_000),
       lost=st.floats(0.0, 0.49))
def test_a_star_of_joins_meshes_and_survives_losing_a_minority(
        size: int, low: int, seed: int, lost: float) -> None:
    group = Group(size, low, seed)
    first = group.ids[0]
    for peer in group.ids[1:]:  # everyone joins the first member, as the README shows
        group.books[peer].learn(first, group.addr[first], group.now)
        group.connect(peer, first)
    for _ in range(4):
        group.round()
    for peer in group.ids:  # each reaches min(low, everyone else) peers, not just the first
        assert len(group.conns[peer].conns) >= min(low, size - 1)
    # Lose the first member and any other minority.
    others = group.ids[1:]
    gone = {first, *group.rng.sample(others, int(lost * size) - 1 if lost * size >= 2 else 0)}
    assert len(gone) < size / 2 or size <= 3
    group.kill(gone)
    for _ in range(3):
        group.round()
    assert group.connected_components() == 1
