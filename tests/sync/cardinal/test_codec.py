"""Codecs: byte-exact Avro against an independent hand encoder, limits, malformed input, fuzz."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sync.cardinal import (
    BATCH_SCHEMA,
    SUBBATCH_SCHEMA,
    Batch,
    BatchDeleteMsg,
    BatchMsg,
    BlockApplied,
    BlockFailed,
    Consumer,
    Limits,
    Reorg,
    ReorgComplete,
    SubBatchHeader,
    SubBatchMsg,
    decode_message,
    encode_message,
)
from sync.errors import LocalProtocolError, RemoteProtocolError
from tests.sync.cardinal.helpers import block, h, messages

HASH = h("blk")
PARENT = h("par")
SUB = h("sub")


# An independent Avro binary encoder (spec section "Binary Encoding"), for byte-exact checks.
def zz(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def av_bytes(b: bytes) -> bytes:
    return zz(len(b)) + b


def av_map(items: list[tuple[str, bytes]]) -> bytes:
    if not items:
        return zz(0)
    return zz(len(items)) + b"".join(av_bytes(k.encode()) + v for k, v in items) + zz(0)


def update_rec(
    value: bytes = b"", count: int = 0, delete: bool = False, sub: bytes = bytes(32)
) -> bytes:
    return av_bytes(value) + zz(count) + (b"\x01" if delete else b"\x00") + sub


def spec_schemas(spec: str) -> list[dict]:  # type: ignore[type-arg]
    """Every JSON object in the spec text that is an Avro record schema."""
    decoder = json.JSONDecoder()
    found, pos = [], 0
    while (pos := spec.find("{", pos)) != -1:
        try:
            obj, end = decoder.raw_decode(spec, pos)
        except ValueError:
            pos += 1
            continue
        if isinstance(obj, dict) and obj.get("type") == "record":
            found.append(obj)
        pos = end
    return found


def test_schemas_are_the_specs_verbatim(testdata: Path) -> None:
    spec = (testdata / "cardinal" / "message-payloads.txt").read_text()
    assert spec_schemas(spec) == [BATCH_SCHEMA, SUBBATCH_SCHEMA]
    assert BATCH_SCHEMA["avro.codec"] == "snappy"


def test_batch_is_byte_exact() -> None:
    msg = Batch(
        HASH,
        300,
        70000,
        PARENT,
        values={"z/inline": b"\x01\x02"},
        deletes=frozenset({"gone"}),
        counts={"foo/": 3},
        subbatches={"state/": SUB},
    )
    key, value = encode_message(msg)
    assert key == b"\x00" + HASH
    expected = (
        zz(300)
        + av_bytes((70000).to_bytes(3, "big"))
        + PARENT
        + av_map(
            [
                ("foo/", update_rec(count=3)),
                ("gone", update_rec(delete=True)),
                ("state/", update_rec(sub=SUB)),
                ("z/inline", update_rec(value=b"\x01\x02")),
            ]
        )
    )
    assert value == expected
    assert decode_message(key, value) == msg


def test_zero_weight_is_empty_bytes() -> None:
    _, value = encode_message(Batch(HASH, 0, 0, PARENT))
    assert value == zz(0) + av_bytes(b"") + PARENT + zz(0)


def test_sub_batch_messages_are_byte_exact() -> None:
    key, value = encode_message(SubBatchHeader(HASH, SUB, 70))
    assert (key, value) == (b"\x01" + HASH + SUB, zz(70))
    msg = SubBatchMsg(HASH, SUB, 64, ("a", "b"), {"k": b"v"})
    key, value = encode_message(msg)
    assert key == b"\x02" + HASH + SUB + zz(64)
    assert value == zz(2) + av_bytes(b"a") + av_bytes(b"b") + zz(0) + av_map(
        [("k", av_bytes(b"v"))]
    )
    assert decode_message(key, value) == msg


def test_simple_messages() -> None:
    assert encode_message(BatchMsg(HASH, "foo/é", b"\x00v")) == (
        b"\x03" + HASH + "foo/é".encode(),
        b"\x00v",
    )
    assert encode_message(BatchDeleteMsg(HASH, "foo/x")) == (b"\x04" + HASH + b"foo/x", b"")
    assert encode_message(Reorg(HASH, 5)) == (b"\x05" + HASH, zz(5))
    assert encode_message(ReorgComplete(HASH, 2**40)) == (b"\x06" + HASH, zz(2**40))
    for msg in (
        BatchMsg(HASH, "k", b"v"),
        BatchDeleteMsg(HASH, "k"),
        Reorg(HASH, 1),
        ReorgComplete(HASH, 1),
    ):
        assert decode_message(*encode_message(msg)) == msg


def test_encoder_rejects_bad_input() -> None:
    with pytest.raises(LocalProtocolError):
        encode_message(Batch(b"short", 0, 0, PARENT))
    with pytest.raises(LocalProtocolError):
        encode_message(Batch(HASH, 0, 2**256, PARENT))
    with pytest.raises(LocalProtocolError):
        encode_message(Batch(HASH, 0, 0, PARENT, values={"a": b""}, deletes=frozenset({"a"})))


MALFORMED = [
    (b"", b""),
    (b"\x00" + HASH[:5], b""),
    (b"\x07" + HASH, b""),
    (b"\x00" + HASH + b"x", b""),
    (b"\x00" + HASH, b"\xff"),
    (b"\x00" + HASH, zz(-1) + av_bytes(b"") + PARENT + zz(0)),  # negative number
    (b"\x00" + HASH, zz(1) + av_bytes(b"\x01" * 33) + PARENT + zz(0)),  # weight > 256 bits
    (b"\x00" + HASH, zz(1) + av_bytes(b"") + PARENT + zz(0) + b"junk"),  # trailing bytes
    (b"\x00" + HASH, zz(1) + av_bytes(b"") + PARENT + av_map([("p", update_rec(count=-2))])),
    (b"\x00" + HASH, zz(1) + av_bytes(b"") + PARENT + av_map([("p", update_rec(b"v", count=2))])),
    (
        b"\x00" + HASH,
        zz(1)
        + av_bytes(b"")
        + PARENT
        + av_map([("a/", update_rec(count=1)), ("a/b", update_rec(count=1))]),
    ),
    (
        b"\x00" + HASH,
        zz(1)
        + av_bytes(b"")
        + PARENT
        + av_map([("a", update_rec(sub=SUB)), ("b", update_rec(sub=SUB))]),
    ),
    (b"\x01" + HASH + SUB, zz(-3)),
    (b"\x01" + HASH + SUB, zz(2_000_000)),
    (b"\x01" + HASH + SUB + b"x", zz(1)),
    (b"\x02" + HASH + SUB, b""),
    (b"\x02" + HASH + SUB + b"\x80\x00", zz(0) + zz(0)),  # non-canonical index
    (b"\x02" + HASH + SUB + zz(1), zz(1)),
    (b"\x03" + HASH + b"\xff\xfe", b"v"),  # key not UTF-8
    (b"\x04" + HASH + b"k", b"not empty"),
    (b"\x05" + HASH, zz(-1)),
    (b"\x06" + HASH, b""),
    (b"\x03" + HASH + b"k" * 5000, b""),  # key over the limit
]


@pytest.mark.parametrize(("key", "value"), MALFORMED)
def test_malformed_messages_raise_remote_protocol_error(key: bytes, value: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_message(key, value)


def test_consumer_names_the_peer_in_errors() -> None:
    with pytest.raises(RemoteProtocolError) as err:
        Consumer().receive(b"\x09" + HASH, b"", peer="12D3KooWpeer")
    assert err.value.peer == "12D3KooWpeer" and err.value.reason == "unknown message type 9"


def test_limits_are_enforced() -> None:
    limits = Limits(max_value=10, max_batch_entries=1, max_count=5)
    with pytest.raises(RemoteProtocolError, match="value too long"):
        decode_message(b"\x03" + HASH + b"k", b"x" * 11, limits)
    two = Batch(HASH, 1, 1, PARENT, values={"a": b"", "b": b""})
    with pytest.raises(RemoteProtocolError, match="update entries"):
        decode_message(*encode_message(two), Limits(max_batch_entries=1))
    many = Batch(HASH, 1, 1, PARENT, counts={"a": 6})
    with pytest.raises(RemoteProtocolError, match="out of range"):
        decode_message(*encode_message(many), Limits(max_count=5))


ORIGINALS = [block("A", 0, None), block("B", 1, None)]
VALID = [(m.key, m.value) for m in messages(*ORIGINALS)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=80), st.binary(max_size=300))
def test_fuzz_random_bytes(key: bytes, value: bytes) -> None:
    try:
        msg = decode_message(key, value)
    except RemoteProtocolError as exc:
        assert exc.reason
        return
    # Whatever decodes re-encodes to something that decodes to the same message.
    assert decode_message(*encode_message(msg)) == msg


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.booleans(), st.integers(0, 400), st.integers(0, 255)), max_size=4),
    st.integers(0, 400),
)
def test_fuzz_mutated_messages_through_the_consumer(
    pair: tuple[bytes, bytes], edits: list[tuple[bool, int, int]], cut: int
) -> None:
    key, value = bytearray(pair[0]), bytearray(pair[1])
    for in_key, pos, byte in edits:
        target = key if in_key else value
        if target:
            target[pos % len(target)] = byte
    value = value[: max(cut, len(value) // 2)]
    consumer = Consumer()
    try:
        consumer.receive(bytes(key), bytes(value))
    except RemoteProtocolError as exc:
        assert exc.reason
    # Then the genuine messages: a mutated copy never turns into a corrupt applied block.
    for k, v in VALID:
        consumer.receive(k, v)
    events = consumer.events()
    failed = {e.hash for e in events if isinstance(e, BlockFailed)}
    for event in events:
        if isinstance(event, BlockApplied):
            assert event.block in ORIGINALS or event.block.hash in failed
