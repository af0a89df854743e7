"""The WANT/EVENTS transfer, both sides, on bytes only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.transfer import (
    EVENTS,
    EVENTS_LAST,
    WANT,
    WANT_LAST,
    EventsPacker,
    WantFetcher,
    WantServer,
    byte_batches,
    pack_items,
    unpack_items,
)

KEYS = [b"key-%03d" % i for i in range(7)]


def test_fetcher_keeps_ahead_and_ends_with_want_last() -> None:
    core = WantFetcher(KEYS, batch=3, ahead=2)
    frames = core.next_frames()
    assert [f[0] for f in frames] == [WANT, WANT]
    assert unpack_items(frames[0][1:], max_items=3, max_item_bytes=64) == KEYS[:3]
    assert core.next_frames() == []  # two answers outstanding
    got = core.receive(pack_items(EVENTS_LAST, [b"e0"]))
    assert got.final and got.wires == [b"e0"]
    last = core.next_frames()
    assert [f[0] for f in last] == [WANT_LAST]


def test_short_answer_reports_withheld_keys() -> None:
    core = WantFetcher(KEYS[:3], batch=3)
    core.next_frames()
    core.receive(pack_items(EVENTS_LAST, []))  # the withholding peer's empty answer
    assert core.answer_done() == KEYS[:3]
    assert core.done and core.withheld_total == 3


def test_partial_answer() -> None:
    core = WantFetcher(KEYS[:3], batch=3)
    core.next_frames()
    core.receive(pack_items(EVENTS, [b"x"]))
    core.accept(KEYS[1])
    core.receive(pack_items(EVENTS_LAST, [b"y"]))
    core.accept(KEYS[0])
    assert core.answer_done() == [KEYS[2]]


@pytest.mark.parametrize("frame, reason", [
    (b"", "expected events"),
    (bytes([WANT]), "expected events"),
    (bytes([EVENTS]), "empty events frame"),
    (bytes([EVENTS, 0x05, 0x01]), "item too large or truncated"),
])
def test_fetcher_rejects_bad_frames(frame: bytes, reason: str) -> None:
    core = WantFetcher(KEYS, batch=3, peer="p")
    core.next_frames()
    with pytest.raises(RemoteProtocolError) as err:
        core.receive(frame)
    assert err.value.reason == reason and err.value.peer == "p"


def test_fetcher_rejects_unrequested_and_unasked_frames() -> None:
    core = WantFetcher(KEYS[:1], batch=1)
    with pytest.raises(RemoteProtocolError):
        core.receive(pack_items(EVENTS_LAST, []))  # nothing asked yet
    core.next_frames()
    core.receive(pack_items(EVENTS_LAST, [b"w"]))
    with pytest.raises(RemoteProtocolError):
        core.accept(b"never asked")
    core.accept(KEYS[0])
    with pytest.raises(RemoteProtocolError):
        core.accept(KEYS[0])  # twice


def test_fetcher_bounds_frames_per_answer() -> None:
    core = WantFetcher(KEYS[:2], batch=2)
    core.next_frames()
    core.receive(pack_items(EVENTS, [b"a"]))
    core.receive(pack_items(EVENTS, [b"b"]))
    with pytest.raises(RemoteProtocolError, match="too many events frames"):
        core.receive(pack_items(EVENTS, [b"c"]))


def test_server_budget_and_order() -> None:
    core = WantServer(budget=4, max_items=10)
    assert core.receive(pack_items(WANT, KEYS[:3])).keys == KEYS[:3]
    with pytest.raises(RemoteProtocolError, match="more events than we hold"):
        core.receive(pack_items(WANT_LAST, KEYS[3:5]))
    core = WantServer(budget=10, max_items=10)
    with pytest.raises(RemoteProtocolError, match="empty want frame"):
        core.receive(pack_items(WANT, []))
    assert core.receive(pack_items(WANT_LAST, [])).last
    with pytest.raises(RemoteProtocolError, match="after the last"):
        core.receive(pack_items(WANT_LAST, []))
    with pytest.raises(RemoteProtocolError, match="more than 2 items"):
        WantServer(budget=10, max_items=2).receive(pack_items(WANT, KEYS[:3]))


def test_byte_batches_hold_the_budget() -> None:
    sizes = [("a", 600), ("b", 600), ("c", 100), ("d", 5000), ("e", 1)]
    assert byte_batches(sizes, 1000, 10) == [["a"], ["b", "c"], ["d"], ["e"]]
    assert byte_batches(sizes, 10**9, 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert byte_batches([], 1000, 10) == []


@given(st.lists(st.binary(min_size=0, max_size=300), max_size=60),
       st.integers(min_value=400, max_value=2000), st.integers(min_value=1, max_value=8))
def test_packer_roundtrip_within_limits(wires: list[bytes], limit: int, items: int) -> None:
    packer = EventsPacker(limit, items)
    frames = [f for w in wires if (f := packer.add(w)) is not None]
    frames.append(packer.finish())
    out: list[bytes] = []
    for i, frame in enumerate(frames):
        assert frame[0] == (EVENTS_LAST if i == len(frames) - 1 else EVENTS)
        got = unpack_items(frame[1:], max_items=items, max_item_bytes=1 << 20)
        assert got or i == len(frames) - 1
        assert len(frame) <= limit or len(got) == 1
        out.extend(got)
    assert out == wires or (not wires and out == [])


@given(st.lists(st.sampled_from(KEYS), unique=True), st.integers(min_value=1, max_value=4),
       st.data())
def test_every_asked_key_is_delivered_or_reported(
        keys: list[bytes], batch: int, data: st.DataObject) -> None:
    core = WantFetcher(keys, batch=batch)
    delivered: set[bytes] = set()
    withheld: list[bytes] = []
    outstanding: list[list[bytes]] = []
    for frame in core.next_frames():
        outstanding.append(unpack_items(frame[1:], max_items=batch, max_item_bytes=64))
    while outstanding:
        chunk = outstanding.pop(0)
        give = data.draw(st.lists(st.sampled_from(chunk), unique=True)) if chunk else []
        core.receive(pack_items(EVENTS_LAST, [b"w"] * len(give)))
        for frame in core.next_frames():
            outstanding.append(unpack_items(frame[1:], max_items=batch, max_item_bytes=64))
        for key in give:
            core.accept(key)
            delivered.add(key)
        withheld += core.answer_done()
    assert core.done
    assert delivered | set(withheld) == set(keys)
    assert not delivered & set(withheld)


def test_want_lists_start_small_and_double_up_to_the_batch() -> None:
    """``first``: the first answer is small (verified and ingested while the peer reads the
    next), the lists double up to ``batch``; every key is asked for once, in order."""
    keys = [b"k%04d" % i for i in range(1000)]
    core = WantFetcher(keys, batch=300, ahead=4, first=32)
    sizes, asked = [], []
    while True:
        frames = core.next_frames()
        for frame in frames:
            got = unpack_items(frame[1:], max_items=300, max_item_bytes=64)
            sizes.append(len(got))
            asked += got
        if not core.answers_pending:
            break
        core.receive(pack_items(EVENTS_LAST, []))
    assert sizes == [32, 64, 128, 256, 300, 220]
    assert asked == keys
