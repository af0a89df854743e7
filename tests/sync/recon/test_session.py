"""The reconciler: the spec's worked example, convergence under random sets and interests,
continuation, budgets and interest checks."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.recon import (
    MemoryKeyStore,
    MissingKeys,
    ReconConfig,
    ReconFinished,
    ReconSession,
    channel_bounds,
    event_key,
    intersect,
    normalize,
    reconcile_in_memory,
    shuttle,
)
from sync.recon.wire import HASH, Limits, MessageWriter
from tests.sync.recon.helpers import FULL, BruteForceStore, make_sets

YOU = [b"ape", b"eel", b"fox", b"gnu"]
THEY = [b"bee", b"cat", b"doe", b"eel", b"fox", b"hog"]


@pytest.mark.parametrize(
    "config", [ReconConfig(), ReconConfig(fanout=2, key_list_threshold=1, split_levels=1)]
)
def test_worked_example(config: ReconConfig) -> None:
    you = MemoryKeyStore.from_sorted(YOU)
    they = MemoryKeyStore.from_sorted(THEY)
    result = reconcile_in_memory(you, they, FULL, FULL, config)
    everything = sorted(set(YOU) | set(THEY))
    assert you.keys(b"", b"\xff", 100) == everything == they.keys(b"", b"\xff", 100)
    assert you.range_hash(b"", b"\xff") == they.range_hash(b"", b"\xff")
    assert sorted(result.initiator_missing) == [b"bee", b"cat", b"doe", b"hog"]
    assert sorted(result.responder_missing) == [b"ape", b"gnu"]
    assert sorted(result.initiator_peer_missing) == [b"ape", b"gnu"]
    assert sorted(result.responder_peer_missing) == [b"bee", b"cat", b"doe", b"hog"]
    assert result.round_trips <= 3


def test_in_sync_is_one_round_trip() -> None:
    keys = sorted(i.to_bytes(3, "big") for i in range(5000))
    a, b = MemoryKeyStore.from_sorted(keys), MemoryKeyStore.from_sorted(keys)
    result = reconcile_in_memory(a, b, FULL, FULL)
    assert result.round_trips == 1 and result.bytes_total < 600
    assert not result.initiator_missing and not result.responder_missing


interest_st = st.lists(
    st.tuples(st.binary(max_size=2), st.binary(min_size=1, max_size=2)).filter(
        lambda r: r[0] < r[1]
    ),
    max_size=3,
)


@settings(deadline=None, max_examples=60)
@given(
    seed=st.integers(0, 2**32),
    mode=st.sampled_from(["empty", "equal", "disjoint", "subset", "overlap"]),
    size=st.integers(0, 2500),
    interests_a=st.one_of(st.just(list(FULL)), interest_st),
    interests_b=st.one_of(st.just(list(FULL)), interest_st),
    fanout=st.sampled_from([2, 4, 16]),
    threshold=st.sampled_from([1, 2, 8]),
    brute=st.booleans(),
    small_messages=st.booleans(),
)
def test_convergence_to_union_within_common_interest(
    seed: int,
    mode: str,
    size: int,
    interests_a: list[tuple[bytes, bytes]],
    interests_b: list[tuple[bytes, bytes]],
    fanout: int,
    threshold: int,
    brute: bool,
    small_messages: bool,
) -> None:
    a_keys, b_keys = make_sets(seed, mode, size)
    if seed % 2:
        a_keys, b_keys = b_keys, a_keys
    a = MemoryKeyStore.from_sorted(sorted(a_keys), load=8)
    b: MemoryKeyStore | BruteForceStore = MemoryKeyStore.from_sorted(sorted(b_keys))
    if brute:
        b = BruteForceStore()
        for key in b_keys:
            b.insert(key)
    config = ReconConfig(fanout=fanout, key_list_threshold=threshold)
    if small_messages:  # continuation everywhere, including the first message
        config = ReconConfig(
            fanout=fanout, key_list_threshold=threshold, max_message_bytes=1792, max_key_bytes=32
        )
    result = reconcile_in_memory(a, b, interests_a, interests_b, config)

    common = intersect(normalize(interests_a), normalize(interests_b))

    def inside(key: bytes) -> bool:
        return any(lo <= key < hi for lo, hi in common)

    a_new = {k for k in b_keys - a_keys if inside(k)}
    b_new = {k for k in a_keys - b_keys if inside(k)}
    assert set(a.keys(b"", b"\xff" * 8, 10**6)) == a_keys | a_new
    assert set(b.keys(b"", b"\xff" * 8, 10**6)) == b_keys | b_new
    assert sorted(result.initiator_missing) == sorted(a_new)
    assert sorted(result.responder_missing) == sorted(b_new)
    assert sorted(result.initiator_peer_missing) == sorted(b_new)
    assert sorted(result.responder_peer_missing) == sorted(a_new)
    n = max(len(a_keys), len(b_keys), 2)
    if small_messages:
        assert result.largest_message <= 1792
    else:
        assert result.round_trips <= math.ceil(math.log(n, fanout)) + 3


def test_continuation_respects_max_message_size() -> None:
    config = ReconConfig(max_message_bytes=2048, max_key_bytes=32)
    a_keys, b_keys = make_sets(7, "overlap", 3000)
    a = MemoryKeyStore.from_sorted(sorted(a_keys))
    b = MemoryKeyStore.from_sorted(sorted(b_keys))
    result = reconcile_in_memory(a, b, FULL, FULL, config)
    assert result.largest_message <= 2048
    assert result.messages > 10
    assert a.keys(b"", b"\xff" * 8, 10**6) == b.keys(b"", b"\xff" * 8, 10**6)
    assert set(a.keys(b"", b"\xff" * 8, 10**6)) == a_keys | b_keys


def test_one_side_empty_gets_everything_in_chunks() -> None:
    config = ReconConfig(max_message_bytes=4096, max_key_bytes=32)
    keys = sorted(i.to_bytes(4, "big") for i in range(0, 40_000, 7))
    a, b = MemoryKeyStore(), MemoryKeyStore.from_sorted(keys)
    result = reconcile_in_memory(a, b, FULL, FULL, config)
    assert a.keys(b"", b"\xff", 10**6) == keys
    assert result.largest_message <= 4096


def test_channel_interest_limits_what_is_exchanged() -> None:
    def keys_for(channel: str, sender: str, count: int) -> list[bytes]:
        return [event_key(1, channel, sender, n, bytes([n % 256]) * 32) for n in range(count)]

    chat_a, chat_b = keys_for("chat", "alice", 40), keys_for("chat", "bob", 30)
    news_a, news_b = keys_for("news", "alice", 20), keys_for("news", "carol", 10)
    a = MemoryKeyStore.from_sorted(sorted(chat_a + news_a))
    b = MemoryKeyStore.from_sorted(sorted(chat_b + news_b))
    chat = channel_bounds(1, "chat")
    result = reconcile_in_memory(a, b, [chat], FULL)
    assert set(a.keys(b"", b"\xff", 1000)) == set(chat_a + news_a + chat_b)
    assert set(b.keys(b"", b"\xff", 1000)) == set(chat_b + news_b + chat_a)
    assert result.round_trips <= 3


def test_disjoint_interests_exchange_nothing() -> None:
    a = MemoryKeyStore.from_sorted([b"a1", b"a2"])
    b = MemoryKeyStore.from_sorted([b"b1", b"z9"])
    result = reconcile_in_memory(a, b, [(b"a", b"b")], [(b"x", b"y")])
    assert result.messages == 2 and not result.initiator_missing and not result.responder_missing


def test_events_and_finish() -> None:
    a = MemoryKeyStore.from_sorted([b"a", b"b"])
    b = MemoryKeyStore.from_sorted([b"b", b"c"])
    ini = ReconSession.initiator(a, FULL)
    res = ReconSession.responder(b, FULL)
    shuttle_result = shuttle(ini, res)
    assert shuttle_result.initiator_missing == [b"c"]
    assert ini.done and res.done
    # shuttle drained the events; the sessions keep their totals
    assert ini.events() == [] and ini.bytes_sent + ini.bytes_received == shuttle_result.bytes_total


def test_events_are_dataclasses() -> None:
    a = MemoryKeyStore.from_sorted([b"a"])
    b = MemoryKeyStore.from_sorted([b"b"])
    ini = ReconSession.initiator(a, FULL)
    res = ReconSession.responder(b, FULL)
    data: bytes | None = ini.start()
    sides = [res, ini]
    turn = 0
    while data is not None:
        data = sides[turn].receive(data)
        turn ^= 1
    events = ini.events()
    assert MissingKeys((b"b",)) in events
    assert isinstance(events[-1], ReconFinished)


def test_api_misuse_is_local_error() -> None:
    store = MemoryKeyStore()
    ini = ReconSession.initiator(store, FULL)
    with pytest.raises(LocalProtocolError):
        ini.receive(b"\x01\x00\x10\x00")
    with pytest.raises(LocalProtocolError):
        ReconSession.responder(store, FULL).start()
    with pytest.raises(LocalProtocolError):
        ReconSession.initiator(store, [(b"b", b"a")])
    with pytest.raises(LocalProtocolError):
        ReconConfig(fanout=1)
    ini.start()
    with pytest.raises(LocalProtocolError):
        ini.start()


def _message(interests: tuple[tuple[bytes, bytes], ...] | None, *ranges: bytes) -> bytes:
    writer = MessageWriter(Limits(), interests)
    for lo, hi in pairwise(ranges):
        assert writer.try_hash(lo, hi, 1, bytes(16))
    return writer.finish(more=False)


def test_ranges_outside_interest_are_rejected() -> None:
    store = MemoryKeyStore.from_sorted([b"b", b"c"])
    res = ReconSession.responder(store, FULL, peer="mallory")
    with pytest.raises(RemoteProtocolError) as info:
        res.receive(_message(((b"a", b"c"),), b"b", b"d"))
    assert info.value.peer == "mallory" and res.done
    with pytest.raises(LocalProtocolError):
        res.receive(_message(((b"a", b"c"),), b"a", b"b"))

    ini = ReconSession.initiator(store, [(b"a", b"c")])
    ini.start()
    with pytest.raises(RemoteProtocolError):
        ini.receive(_message(((b"a", b"z"),), b"c", b"d"))


def test_first_message_must_state_interests_once() -> None:
    store = MemoryKeyStore.from_sorted([b"b"])
    with pytest.raises(RemoteProtocolError):
        ReconSession.responder(store, FULL).receive(_message(None, b"a", b"c"))
    ini = ReconSession.initiator(store, FULL)
    ini.start()
    reply = ini.receive(_message(FULL, b"a", b"c"))
    assert reply is not None
    with pytest.raises(RemoteProtocolError):
        ini.receive(_message(FULL, b"a", b"c"))


def test_diff_without_key_list_is_rejected() -> None:
    store = MemoryKeyStore.from_sorted([bytes([i]) for i in range(100)])
    ini = ReconSession.initiator(store, FULL)
    ini.start()
    writer = MessageWriter(Limits(), FULL)
    writer.try_keys(3, b"m", b"n", [b"m1"])
    with pytest.raises(RemoteProtocolError, match="no key list"):
        ini.receive(writer.finish(more=False))


def test_diff_bitmap_must_match_our_key_list() -> None:
    store = MemoryKeyStore.from_sorted([b"b", b"c"])
    ini = ReconSession.initiator(store, FULL)
    ini.start()  # two keys: sent as one key list over FULL
    writer = MessageWriter(Limits(), FULL)
    writer.try_keys(3, b"a", b"d", [], listed=(b"b", b"bb", b"c"), lacking=frozenset({b"c"}))
    with pytest.raises(RemoteProtocolError, match="bitmap"):
        ini.receive(writer.finish(more=False))


def test_round_and_byte_budgets() -> None:
    a_keys, b_keys = make_sets(3, "disjoint", 2000)
    for config in (ReconConfig(max_messages=2), ReconConfig(max_bytes_received=3000)):
        a = MemoryKeyStore.from_sorted(sorted(a_keys))
        b = MemoryKeyStore.from_sorted(sorted(b_keys))
        ini = ReconSession.initiator(a, FULL, config)
        res = ReconSession.responder(b, FULL, config)
        with pytest.raises(RemoteProtocolError, match="budget"):
            shuttle(ini, res)
        assert ini.done or res.done


def test_peer_that_keeps_asking_for_more_hits_the_budget() -> None:
    store = MemoryKeyStore.from_sorted([b"b"])
    res = ReconSession.responder(store, FULL, ReconConfig(max_messages=5))
    with pytest.raises(RemoteProtocolError, match="budget"):
        first = True
        while True:
            writer = MessageWriter(Limits(), FULL if first else None)
            assert writer.try_hash(b"a", b"c", 9, bytes(16)) or True
            first = False
            res.receive(writer.finish(more=True))
    assert res.error is not None and res.events() == []


def test_hash_item_kind_constant() -> None:
    assert HASH == 1


def test_inserting_fetched_keys_during_the_session_still_converges() -> None:
    a_keys, b_keys = make_sets(5, "overlap", 1500)
    a = MemoryKeyStore.from_sorted(sorted(a_keys))
    b = MemoryKeyStore.from_sorted(sorted(b_keys))
    ini = ReconSession.initiator(a, FULL)
    res = ReconSession.responder(b, FULL)
    data: bytes | None = ini.start()
    sides = [(res, b), (ini, a)]
    turn = 0
    while data is not None:
        session, store = sides[turn]
        data = session.receive(data)
        for event in session.events():
            if isinstance(event, MissingKeys):
                for key in event.keys:
                    assert store.insert(key)
        turn ^= 1
    assert ini.done and res.done
    assert a.keys(b"", b"\xff" * 8, 10**6) == b.keys(b"", b"\xff" * 8, 10**6)
    assert len(a) == len(a_keys | b_keys)


def test_oversized_interests_are_refused_locally() -> None:
    config = ReconConfig(max_message_bytes=5376)
    many = [(bytes([i]) * 200, bytes([i]) * 200 + b"\x01") for i in range(1, 60)]
    with pytest.raises(LocalProtocolError):
        ReconSession.initiator(MemoryKeyStore(), many, config)
    with pytest.raises(LocalProtocolError):
        ReconSession.initiator(MemoryKeyStore(), [(b"a" * 300, b"b")], config)


def test_message_that_asks_for_too_much_work_is_refused() -> None:
    keys = sorted(i.to_bytes(3, "big") for i in range(20_000))
    store = MemoryKeyStore.from_sorted(keys)
    res = ReconSession.responder(store, FULL, ReconConfig(max_pending_ranges=300))
    writer = MessageWriter(Limits(), FULL)
    bounds = [b""] + [i.to_bytes(3, "big") for i in range(0, 20_000, 500)] + [b"\xff"]
    for lo, hi in pairwise(bounds):
        assert writer.try_hash(lo, hi, 1, bytes(16))
    with pytest.raises(RemoteProtocolError, match="too much work"):
        res.receive(writer.finish(more=False))


@pytest.mark.parametrize("responder_interests", [[(b"\x20", b"\x90")], []])
def test_first_message_continued_over_a_narrower_common_interest(
    responder_interests: list[tuple[bytes, bytes]],
) -> None:
    # split_levels=1 makes the first message split straight to leaves, so it does not fit
    config = ReconConfig(max_message_bytes=3000, max_key_bytes=32, split_levels=1)
    a_keys, b_keys = make_sets(9, "disjoint", 1500)
    a = MemoryKeyStore.from_sorted(sorted(a_keys))
    b = MemoryKeyStore.from_sorted(sorted(b_keys))
    result = reconcile_in_memory(a, b, FULL, responder_interests, config)
    common = intersect(normalize(FULL), normalize(responder_interests))
    inside = {k for k in a_keys | b_keys if any(lo <= k < hi for lo, hi in common)}
    assert set(a.keys(b"", b"\xff" * 8, 10**6)) == a_keys | (inside & b_keys)
    assert set(b.keys(b"", b"\xff" * 8, 10**6)) == b_keys | (inside & a_keys)
    assert result.messages >= 3


def test_a_run_of_keys_the_peer_lacks_reaches_it_in_the_third_message() -> None:
    """A restarted peer's burst (issue 37): the initiator holds 976 keys after the 2,000 both
    hold. A range where most of the keys are not the peer's is answered with the keys, not
    split again: the responder learns every key it lacks from the initiator's second message
    (it took the fifth), and four messages end the session."""
    def keys(sender: str, lo: int, hi: int) -> list[bytes]:
        return [event_key(1, "general", sender, n, bytes([n % 256]) * 32) for n in range(lo, hi)]

    shared = keys("b", 0, 2000) + keys("x", 0, 500)
    burst = keys("b", 2000, 2976)
    ini = ReconSession.initiator(MemoryKeyStore.from_sorted(sorted(shared + burst)), FULL)
    res = ReconSession.responder(MemoryKeyStore.from_sorted(sorted(shared)), FULL)
    first = ini.start()
    assert isinstance(first, bytes)
    second = res.receive(first)
    assert isinstance(second, bytes)
    third = ini.receive(second)
    assert isinstance(third, bytes)
    res.receive(third)
    learned = [k for e in res.events() if isinstance(e, MissingKeys) for k in e.keys]
    assert sorted(learned) == burst
    result = reconcile_in_memory(MemoryKeyStore.from_sorted(sorted(shared + burst)),
                                 MemoryKeyStore.from_sorted(sorted(shared)), FULL, FULL)
    assert result.messages <= 4 and sorted(result.responder_missing) == burst
