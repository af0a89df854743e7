"""sync.varint and sync.framing: the one varint and the sans-IO length-prefix frame decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.framing import FrameDecoder, FrameError, encode_frame
from sync.varint import read_uvarint, uvarint, uvarint_prefix

MIB = 1024 * 1024


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_uvarint_roundtrip_and_minimal(value: int) -> None:
    data = uvarint(value)
    assert read_uvarint(b"\x07" + data + b"tail", 1) == (value, 1 + len(data))
    assert data[-1] != 0 or len(data) == 1  # minimal: no trailing zero group


def test_uvarint_known_encodings() -> None:
    assert uvarint(0) == b"\x00"
    assert uvarint(127) == b"\x7f"
    assert uvarint(128) == b"\x80\x01"
    assert uvarint(300) == b"\xac\x02"
    assert uvarint(16383) == b"\xff\x7f"
    assert uvarint(16384) == b"\x80\x80\x01"  # first value past the lookup table
    with pytest.raises(ValueError):
        uvarint(-1)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "truncated"),
        (b"\x80", "truncated"),
        (b"\x80\x00", "non-minimal"),
        (b"\xff" * 9 + b"\x01", "too long"),
    ],
)
def test_read_uvarint_refuses_bad_input(raw: bytes, reason: str) -> None:
    with pytest.raises(RemoteProtocolError, match=reason):
        read_uvarint(raw, 0)


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=300), st.integers(min_value=300, max_value=10 * MIB))
def test_frame_prefix_roundtrip(payload: bytes, limit: int) -> None:
    frame = encode_frame(payload)
    parsed = uvarint_prefix(frame, limit)
    assert parsed is not None
    length, prefix_len = parsed
    assert frame[prefix_len : prefix_len + length] == payload
    assert prefix_len + length == len(frame)
    # Any strict prefix of the length prefix is "need more bytes", never an error.
    for cut in range(prefix_len):
        assert uvarint_prefix(frame[:cut], limit) is None


@settings(deadline=None, max_examples=200)
@given(
    st.lists(st.binary(max_size=200), max_size=20),
    st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=10),
)
def test_decoder_yields_frames_whatever_the_chunking(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(max_frame_bytes=200, peer="p")
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        decoder.feed(stream[pos : pos + step])
        pos, i = pos + step, i + 1
        while (frame := decoder.next_frame()) is not None:
            out.append(frame)
        assert decoder.buffered <= 200 + 2  # never more than one frame and its prefix
    assert out == frames
    assert decoder.buffered == 0
    decoder.end_of_stream()  # clean close at a frame boundary


def test_decoder_wanted_counts_missing_bytes() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    assert decoder.wanted() == 1
    decoder.feed(encode_frame(b"x" * 300)[:5])  # 2-byte prefix and 3 payload bytes
    assert decoder.next_frame() is None
    assert decoder.wanted() == 297


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (encode_frame(b"x" * 11)[:1], "longer than"),  # 11 > limit 10
        (bytes([0x80, 0x00]), "non-minimal"),
        (bytes([0xFF] * 10), "longer than"),
    ],
)
def test_bad_prefixes_raise_frame_error(raw: bytes, reason: str) -> None:
    decoder = FrameDecoder(max_frame_bytes=10, peer="12D3KooWpeer")
    decoder.feed(raw)
    with pytest.raises(FrameError, match=reason) as info:
        decoder.next_frame()
    assert isinstance(info.value, RemoteProtocolError)
    assert info.value.peer == "12D3KooWpeer"
    assert decoder.buffered == 0  # nothing of a refused frame is kept
    with pytest.raises(FrameError, match="unusable"):
        decoder.feed(b"\x01x")


def test_oversized_frame_refused_before_its_payload_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=4 * MIB)
    decoder.feed(bytes([0x80, 0x80, 0x80, 0x04]))  # 8 MiB announced, no payload yet
    with pytest.raises(FrameError, match="longer than"):
        decoder.next_frame()


def test_overlong_varint_is_garbage_even_under_huge_limit() -> None:
    with pytest.raises(RemoteProtocolError, match="not a valid uvarint"):
        uvarint_prefix(bytes([0x80] * 10 + [0x01]), 2**80)


def test_stream_cut_inside_a_frame_is_an_error() -> None:
    decoder = FrameDecoder(max_frame_bytes=100, peer="p")
    decoder.feed(encode_frame(b"0123456789")[:5])
    assert decoder.next_frame() is None
    with pytest.raises(FrameError, match="inside a frame"):
        decoder.end_of_stream()


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=64))
def test_garbage_gives_frames_or_a_frame_error_and_bounded_memory(data: bytes, step: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=100, peer="p")
    try:
        for pos in range(0, len(data), step):
            decoder.feed(data[pos : pos + step])
            while (frame := decoder.next_frame()) is not None:
                assert len(frame) <= 100
            # Never more than one frame's prefix and payload, plus the chunk just fed.
            assert decoder.buffered <= 9 + 100 + step
        decoder.end_of_stream()
    except FrameError as exc:
        assert exc.peer == "p" and exc.reason
