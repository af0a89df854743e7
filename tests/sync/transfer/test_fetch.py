"""Fetch-by-id requests and answers, and in-flight caps."""

from __future__ import annotations

import random

import pytest

from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.sds.events import MissingEntry
from sync.transfer import (
    FetchQueue,
    FetchReader,
    InFlight,
    encode_request,
    parse_request,
    plan_peers,
)

IDS = [f"{i:064x}" for i in range(5)]


def test_request_roundtrip_and_dedup() -> None:
    assert parse_request(encode_request(IDS + IDS[:2]), max_ids=10) == IDS


@pytest.mark.parametrize("data", [
    b"\xff" * 100,
    b"xyz\n",
    ("ab" * 32).upper().encode(),
    IDS[0][:63].encode(),
])
def test_malformed_requests(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="malformed"):
        parse_request(data, max_ids=10, peer="p")


def test_request_size_checked_before_decoding() -> None:
    with pytest.raises(RemoteProtocolError, match="max 2 ids"):
        parse_request(b"\n" * 10_000, max_ids=2)
    with pytest.raises(RemoteProtocolError, match="max 2 ids"):
        parse_request(encode_request(IDS[:3]), max_ids=2)
    with pytest.raises(RemoteProtocolError, match="asks for 3 ids"):
        parse_request(b"a\nb\nc", max_ids=2)


def test_reader_bounds_the_answer() -> None:
    reader = FetchReader(IDS[:2], max_event_bytes=10, peer="p")
    assert reader.receive(b"a") == b"a"
    assert reader.receive(b"b") == b"b"
    with pytest.raises(RemoteProtocolError, match="more events than ids"):
        reader.receive(b"c")
    with pytest.raises(RemoteProtocolError, match="size limit"):
        FetchReader(IDS[:1], max_event_bytes=10).receive(b"x" * 11)
    reader = FetchReader(IDS[:1])
    assert reader.receive(b"") is None and reader.done
    with pytest.raises(LocalProtocolError):
        reader.receive(b"")


def test_plan_peers_senders_first_never_banned() -> None:
    assert plan_peers(["s1", "s1", "bad"], ["o1", "s1", "o2", "o3"], 2,
                      frozenset({"bad", "o1"})) == ["s1", "o2", "o3"]


def test_in_flight_caps() -> None:
    caps = InFlight(per_peer=2, total=3)
    assert caps.acquire("a") and caps.acquire("a")
    assert not caps.acquire("a")
    assert caps.acquire("b")
    assert not caps.acquire("c")  # total reached
    assert caps.refused_total == 2
    caps.release("a")
    assert caps.acquire("c")
    for peer in ("a", "b", "c", "c"):
        caps.release(peer)
    assert len(caps) == 0 and caps.of("a") == 0


def test_plan_peers_random_order_from_the_seeded_generator() -> None:
    others = [f"o{i}" for i in range(10)]
    plans = [plan_peers(["s"], others, 3, frozenset({"o0"}), random.Random(seed))
             for seed in (1, 1, 2, 3, 4)]
    assert plans[0] == plans[1]  # same seed, same plan
    assert len({tuple(p) for p in plans}) > 2
    for plan in plans:
        assert plan[0] == "s" and len(plan) == 4 and "o0" not in plan
        assert len(set(plan)) == 4 and set(plan[1:]) <= set(others)


def entry(i: int) -> MissingEntry:
    return MissingEntry(IDS[i], None, None)


def test_fetch_queue_waits_for_the_grace_then_batches() -> None:
    q = FetchQueue(grace_s=1.0, max_ids=3)
    assert q.get_timer() is None and q.handle_timer(100.0) == []
    q.want([entry(0), entry(1)], now=10.0)
    q.want([entry(1), entry(2), entry(3)], now=10.5)  # entry 1 is queued already
    assert q.get_timer() == 11.0
    assert q.handle_timer(10.99) == []
    first = q.handle_timer(11.0)
    # The oldest is due: the next ones go along, up to max_ids.
    assert [e.message_id for e in first] == [IDS[0], IDS[1], IDS[2]]
    assert q.get_timer() == 11.5
    q.want([entry(0)], now=11.2)  # still being fetched: not queued again
    assert [e.message_id for e in q.handle_timer(11.5)] == [IDS[3]]
    assert q.get_timer() is None
    q.done(first)
    q.want([entry(0)], now=12.0)
    assert q.get_timer() == 13.0 and len(q) == 2  # ids 0 (queued) and 3 (in flight)


def test_fetch_queue_refuses_bad_settings() -> None:
    with pytest.raises(ValueError):
        FetchQueue(grace_s=-1.0, max_ids=1)
