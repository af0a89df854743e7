"""The "go" producer layout, byte for byte, against layouts worked out by hand from the spec and
the Go reference's rules (SendBatch: all deletes at index 0, then one message per update in
sorted key order; its Avro library: arrays and maps in blocks of at most 100 items, each a
negative count and a byte size, then a zero count)."""

from __future__ import annotations

import pytest

from sync.cardinal import (
    BlockApplied,
    Consumer,
    PrefixRouter,
    Producer,
    SubBatchMsg,
    decode_message,
    make_payload,
    make_sub_batch,
)
from sync.errors import LocalProtocolError

BLOCK = bytes(31) + b"\x01"
PARENT = bytes(32)
BATCH_ID = bytes(31) + b"\xff"


def s(text: str) -> bytes:
    """An Avro string whose length fits one zigzag byte (< 64)."""
    assert len(text) < 64
    return bytes([2 * len(text)]) + text.encode()


def go_producer() -> Producer:
    return Producer(PrefixRouter({"foo/": "foo", "state/": "state"}, "default"), layout="go")


def reference_payload():  # type: ignore[no-untyped-def]
    return make_payload(
        BLOCK,
        5,
        PARENT,
        256,
        {"foo/something": b"gnihtemos/oof", "x": b"v"},
        [],
        [make_sub_batch("state/", BATCH_ID, {"state/thing": b"thing!", "state/a": b"1"},
                        ["other/", "whatever/"])],
    )


def by_key(prod: Producer):  # type: ignore[no-untyped-def]
    return {m.key: m for m in prod.messages_for(reference_payload())}


def test_sub_batch_header_and_messages_byte_exact() -> None:
    msgs = by_key(go_producer())
    header = b"\x01" + BLOCK + BATCH_ID
    assert msgs[header].value == b"\x06"  # AvroInt(3): one delete message + two updates
    assert msgs[header].channel == "state"
    # Index 0: every delete, in one array block of 2 (zigzag -2 = 0x03), size 7 + 10 = 17
    # (0x22), then the end of the array, then an empty updates map.
    deletes = s("other/") + s("whatever/")
    assert len(deletes) == 17
    assert msgs[header[:0] + b"\x02" + BLOCK + BATCH_ID + b"\x00"].value == (
        b"\x03\x22" + deletes + b"\x00" + b"\x00"
    )
    # Index 1 and 2: one update each, sorted by key ("state/a" < "state/thing"): an empty
    # deletes array, then a map block of 1 (zigzag -1 = 0x01) with its size.
    first = s("state/a") + b"\x02" + b"1"
    second = s("state/thing") + b"\x0c" + b"thing!"
    assert msgs[b"\x02" + BLOCK + BATCH_ID + b"\x02"].value == (
        b"\x00" + b"\x01" + bytes([2 * len(first)]) + first + b"\x00"
    )
    assert msgs[b"\x02" + BLOCK + BATCH_ID + b"\x04"].value == (
        b"\x00" + b"\x01" + bytes([2 * len(second)]) + second + b"\x00"
    )
    assert len([k for k in msgs if k[0] == 2]) == 3


def test_batch_byte_exact() -> None:
    msgs = by_key(go_producer())
    zero = bytes(32)
    # update record: bytes value, int count, boolean delete, fixed(32) subbatch
    entries = (
        s("foo/") + b"\x00" + b"\x02" + b"\x00" + zero  # count 1 (one BatchMsg under foo/)
        + s("state/") + b"\x00" + b"\x00" + b"\x00" + BATCH_ID  # the sub batch
        + s("x") + b"\x02v" + b"\x00" + b"\x00" + zero  # an inline value
    )
    assert len(entries) == 120  # zigzag 240 = varint f0 01
    expected = (
        b"\x0a"  # num 5
        + b"\x04\x01\x00"  # weight 256, minimal big-endian bytes
        + PARENT
        + b"\x05" + b"\xf0\x01" + entries + b"\x00"  # a map block of 3 (zigzag -3 = 5)
    )
    batch = msgs[b"\x00" + BLOCK]
    assert batch.value == expected
    assert batch.channel == "default"
    # BatchMsg: key prefix 3, block hash, application key; the raw value.
    assert msgs[b"\x03" + BLOCK + b"foo/something"].value == b"gnihtemos/oof"


def test_long_arrays_are_written_in_blocks_of_100() -> None:
    deletes = [f"state/d{i:03d}" for i in range(150)]
    payload = make_payload(
        BLOCK, 1, PARENT, 1, {}, [], [make_sub_batch("state/", BATCH_ID, {}, deletes)]
    )
    (item,) = [m for m in go_producer().messages_for(payload) if m.key[0] == 2]
    first = b"".join(s(d) for d in deletes[:100])
    second = b"".join(s(d) for d in deletes[100:])
    # zigzag(-100) = 199 = c7 01; zigzag(-50) = 99 = 0x63; sizes as zigzag varints
    def varint(n: int) -> bytes:
        z = 2 * n
        out = b""
        while z >= 0x80:
            out += bytes([z & 0x7F | 0x80])
            z >>= 7
        return out + bytes([z])

    assert item.value == (
        b"\xc7\x01" + varint(len(first)) + first + b"\x63" + varint(len(second)) + second
        + b"\x00" + b"\x00"
    )
    assert decode_message(item.key, item.value) == SubBatchMsg(
        BLOCK, BATCH_ID, 0, tuple(deletes), {}
    )


def test_syncnode_and_go_layouts_differ_only_in_sub_batches_and_avro_blocks() -> None:
    syncnode = Producer(go_producer().router)
    ours = {m.key: m.value for m in syncnode.messages_for(reference_payload())}
    go = {m.key: m.value for m in go_producer().messages_for(reference_payload())}
    # Ours: deletes and updates chunked by 64, so 2 items; the reference: 3.
    assert ours[b"\x01" + BLOCK + BATCH_ID] == b"\x04"
    assert go[b"\x01" + BLOCK + BATCH_ID] == b"\x06"
    # Same meaning for the Batch, different Avro block form.
    assert decode_message(b"\x00" + BLOCK, ours[b"\x00" + BLOCK]) == decode_message(
        b"\x00" + BLOCK, go[b"\x00" + BLOCK]
    )
    assert ours[b"\x00" + BLOCK] != go[b"\x00" + BLOCK]
    assert {k: v for k, v in ours.items() if k[0] in (3, 4)} == {
        k: v for k, v in go.items() if k[0] in (3, 4)
    }


def test_go_layout_alone_is_consumed() -> None:
    consumer = Consumer()
    payload = make_payload(
        BLOCK, 0, PARENT, 0, {"foo/a": b"1"}, ["foo/b"],
        [make_sub_batch("state/", BATCH_ID, {"state/x": b"2"}, ["gone"])],
    )
    for m in go_producer().messages_for(payload):
        consumer.receive(m.key, m.value, m.channel, "go-producer")
    assert [e.block for e in consumer.events() if isinstance(e, BlockApplied)] == [payload]


def test_unknown_layout_is_refused() -> None:
    with pytest.raises(LocalProtocolError):
        Producer(PrefixRouter({}), layout="java")
