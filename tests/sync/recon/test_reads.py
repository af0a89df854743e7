"""Key-store reads as requests (sync/recon/reads.py): the key store never reads, it asks.

Sessions over ``SummaryKeyStore``s whose logs fail the test when read during a step reconcile
exactly as sessions over memory stores do; a step that lacks reads returns the action
``ReadKeys`` having changed nothing, and the driver feeds the reads back as the input
``KeysRead`` (no step raises to ask). The store holds no reader at all: the driver answers.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import LocalProtocolError
from sync.recon import (
    MemoryKeyStore,
    ReadKeys,
    ReconConfig,
    ReconSession,
    SummaryKeyStore,
    insert_keys,
    read_keys,
    shuttle,
)
from sync.recon.eventid import channel_bounds
from sync.recon.session import Step
from sync.recon.sha256a import wide_of
from tests.harness.hostile import recon_flood_frame
from tests.sync.recon.helpers import FULL

keys_st = st.lists(st.binary(min_size=1, max_size=3), max_size=200, unique=True)


class GuardedSource:
    """A sorted list as the log the driver reads, which fails the test if read during a step."""

    def __init__(self, keys: list[bytes]) -> None:
        self.items = sorted(keys)
        self.in_step = False
        self.calls = 0

    def _check(self) -> None:
        if self.in_step:
            raise AssertionError("the key source was read inside a session step")
        self.calls += 1

    def add(self, key: bytes) -> bool:
        i = bisect.bisect_left(self.items, key)
        if i < len(self.items) and self.items[i] == key:
            return False
        self.items.insert(i, key)
        return True

    def present(self, keys: Sequence[bytes]) -> set[bytes]:
        self._check()
        held = set(self.items)
        return {k for k in keys if k in held}

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]:
        self._check()
        i = bisect.bisect_left(self.items, lo)
        j = len(self.items) if hi is None else bisect.bisect_left(self.items, hi)
        return self.items[i : min(j, i + limit)]


class Driven:
    """A session driven as the node's Recon worker drives it: steps under the guard, reads
    answered between them."""

    def __init__(self, session: ReconSession, store: SummaryKeyStore,
                 source: GuardedSource) -> None:
        self.session, self.store, self.source = session, store, source
        self.asked = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.session, name)

    def _run(self, step: Callable[[], Step]) -> bytes | None:
        self.source.in_step = True
        try:
            got = step()
            while isinstance(got, ReadKeys):
                self.asked += 1
                assert self.asked < 10_000, "a step that never settles"
                self.source.in_step = False
                answer = read_keys(self.source, got.reads)
                self.source.in_step = True
                got = self.session.keys_read(answer)
            return got
        finally:
            self.source.in_step = False

    def start(self) -> bytes | None:
        return self._run(self.session.start)

    def receive(self, data: bytes) -> bytes | None:
        return self._run(lambda: self.session.receive(data))


def _asking(keys: list[bytes], config: ReconConfig, *, initiator: bool,
            cache_keys: int, answer_keys: int | None = None) -> Driven:
    source = GuardedSource([])
    store = SummaryKeyStore(load=4, max_buckets=64, cache_keys=cache_keys,
                            answer_keys=answer_keys)
    insert_keys(store, [k for k in keys if source.add(k)], source)
    make = ReconSession.initiator if initiator else ReconSession.responder
    return Driven(make(store, FULL, config), store, source)


def _memory(keys: list[bytes], config: ReconConfig, *, initiator: bool) -> ReconSession:
    store = MemoryKeyStore()
    for key in keys:
        store.insert(key)
    make = ReconSession.initiator if initiator else ReconSession.responder
    return make(store, FULL, config)


@settings(deadline=None, max_examples=80)
@given(ours=keys_st, theirs=keys_st, threshold=st.integers(2, 12),
       cache_keys=st.sampled_from([0, 8, 1000]), answer_keys=st.sampled_from([None, 0, 9]))
def test_asking_sessions_reconcile_like_memory_ones(
        ours: list[bytes], theirs: list[bytes], threshold: int, cache_keys: int,
        answer_keys: int | None) -> None:
    """Also when the answers a step may hold are bounded below what it reads (``answer_keys``
    0: only the last round's): what it computed is kept, the step settles on requests."""
    config = ReconConfig(key_list_threshold=threshold)
    a = _asking(ours, config, initiator=True, cache_keys=cache_keys, answer_keys=answer_keys)
    b = _asking(theirs, config, initiator=False, cache_keys=cache_keys,
                answer_keys=answer_keys)
    got = shuttle(cast(ReconSession, a), cast(ReconSession, b))
    want = shuttle(_memory(ours, config, initiator=True),
                   _memory(theirs, config, initiator=False))
    assert got == want
    assert sorted(got.initiator_missing) == sorted(set(theirs) - set(ours))
    assert sorted(got.responder_missing) == sorted(set(ours) - set(theirs))
    if (ours or theirs) and not cache_keys:
        assert a.asked + b.asked > 0  # with no cache every step that reads asks


def test_a_step_that_asks_waits_where_it_asked_and_does_nothing_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A step that lacks reads stops where it must read and goes on from there once they are
    answered: each differing range is split once, and no read is asked for twice, though
    the splits' reads depend on the hashes' (rounds one after the other)."""
    keys = [bytes([i, j]) for i in range(0, 256, 3) for j in range(0, 256, 51)]
    config = ReconConfig(key_list_threshold=4)
    a = _asking(keys, config, initiator=True, cache_keys=0)
    b = _asking(keys[::2], config, initiator=False, cache_keys=0)
    first = a.start()
    assert first is not None
    split: list[tuple[bytes, bytes]] = []
    real = ReconSession._split

    def counting(self: ReconSession, lo: bytes, hi: bytes, count: int, level: int) -> object:
        split.append((lo, hi))
        return real(self, lo, hi, count, level)

    monkeypatch.setattr(ReconSession, "_split", counting)
    b.source.in_step = True
    step: Step = b.session.receive(first)
    b.source.in_step = False
    with pytest.raises(LocalProtocolError):  # one step at a time: the waiting one first
        b.session.receive(first)
    asked: list[object] = []
    while isinstance(step, ReadKeys):
        asked += [*step.reads.ranges, *step.reads.present]
        answer = read_keys(b.source, step.reads)
        step = b._run(lambda answer=answer: b.session.keys_read(answer))  # type: ignore[misc]
    assert isinstance(step, bytes)  # answered: the message went through
    assert split and len(split) == len(set(split))
    assert len(asked) == len(set(asked)) > 0


def test_the_store_asks_for_every_read_and_holds_no_reader() -> None:
    """Queries and the bucket splits after an insert ask (``wanted``); the driver answers."""
    source = GuardedSource([])
    store = SummaryKeyStore(load=2, max_buckets=8, cache_keys=0)
    assert not any(isinstance(v, GuardedSource) for v in vars(store).values())
    keys = [b"a", b"b", b"c", b"d", b"e", b"f"]
    for key in keys:
        source.add(key)
    source.in_step = True  # the store never reads: an insert asks for its splits' reads
    assert store.insert_many(keys) == len(keys)
    source.in_step = False
    splits = store.wanted()
    assert splits is not None and splits.ranges
    before = len(store.summary)
    store.answer(read_keys(source, splits))
    store.split_pending()
    while (more := store.wanted()) is not None:
        store.answer(read_keys(source, more))
        store.split_pending()
    assert len(store.summary) > before  # split with the answers
    source.in_step = True
    store.count(b"b", b"z")  # recorded, not read (what it returns is void)
    source.in_step = False
    reads = store.wanted()
    assert reads is not None and reads.ranges
    store.answer(read_keys(source, reads))
    assert store.count(b"b", b"z") == 5
    assert store.wanted() is None


def _flood_store(extra: int, cache_keys: int = 1000
                 ) -> tuple[SummaryKeyStore, GuardedSource, tuple[bytes, bytes]]:
    """A store of 200 accounted keys of one channel (one bucket), over a log that also holds
    ``extra`` keys committed but not yet accounted (its bucket reads do not match)."""
    lo, hi = channel_bounds(1, "general")
    rng = random.Random(7)
    accounted = sorted(lo + rng.randbytes(8) for _ in range(200))
    source = GuardedSource([])
    store = SummaryKeyStore(load=256, max_buckets=64, cache_keys=cache_keys)
    insert_keys(store, [k for k in accounted if source.add(k)], source)
    for _ in range(extra):
        source.add(lo + rng.randbytes(8))
    return store, source, (lo, hi)


def _answer(session: ReconSession, source: GuardedSource, frame: bytes) -> Step:
    step = session.receive(frame[1:])  # the frame's first byte is the stream's type
    while isinstance(step, ReadKeys):
        step = session.keys_read(read_keys(source, step.reads))
    return step


def test_a_step_stops_once_its_batch_reads_missed() -> None:
    """A message's range hashes are read in one batch before its ranges are handled; when that
    batch asked for reads, the run is void and stops there, before any range is handled (the
    run on answers does that work once)."""
    store, source, bounds = _flood_store(extra=0, cache_keys=0)  # every run must ask
    handled: list[str] = []

    class Counting:
        def __getattr__(self, name: str) -> object:
            if name in ("count", "keys", "key_at"):
                handled.append(name)
            return getattr(store, name)

    session = ReconSession.responder(cast(SummaryKeyStore, Counting()), [bounds])
    frame = recon_flood_frame(items=500)
    step = session.receive(frame[1:])
    assert isinstance(step, ReadKeys)
    assert handled == []
    reply = session.keys_read(read_keys(source, step.reads))
    assert isinstance(reply, bytes) and handled  # answered: the ranges are handled now


def test_a_read_that_does_not_match_hashes_each_key_once_a_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket read holding keys the store has not accounted yet (commits it has not heard
    of) is not cached, but its running sums serve every bound of the step in that bucket:
    each key is hashed at most twice (front and back sums), not once per bound."""
    calls = 0

    def counting(key: bytes) -> int:
        nonlocal calls
        calls += 1
        return wide_of(key)

    store, source, bounds = _flood_store(extra=3)
    monkeypatch.setattr("sync.recon.summary.wide_of", counting)
    frame = recon_flood_frame(items=2000)
    reply = _answer(ReconSession.responder(store, [bounds]), source, frame)
    assert isinstance(reply, bytes)
    assert store.mismatched_reads > 0
    assert calls <= 2 * len(source.items)
