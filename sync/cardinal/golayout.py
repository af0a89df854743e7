"""The Go reference producer's message layout (``[blocks] producer_layout = "go"``).

Written from the spec and the reference's documented rules (docs/interop.md, "Cardinal"):

* a sub batch is sent as its SubBatchHeader, then, if it has deletes, ONE SubBatchMsg at index 0
  holding all of them, then one SubBatchMsg per update, in sorted key order;
* Avro arrays and maps are written as the reference's Avro library writes them: blocks of at
  most 100 items, each block a negative item count and its size in bytes, then a zero count
  (the spec's Avro allows both this and the positive-count form ``fastavro`` writes).

Everything else (keys, the Batch fields, BatchMsg and BatchDeleteMsg) is the same in both
layouts. Entries of the Batch updates map are sorted by key: the reference writes them in its
map iteration order, which varies, and sorted is one of its possible outputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from sync.cardinal.codec import (
    ZERO_HASH,
    Batch,
    CardinalMessage,
    MessageType,
    SubBatchHeader,
    SubBatchMsg,
    avro_long,
    encode_message,
)
from sync.cardinal.payload import SubBatch
from sync.errors import LocalProtocolError

__all__ = ["GO_BLOCK_LENGTH", "encode_message_go", "go_sub_batch_messages"]

GO_BLOCK_LENGTH: Final = 100


_long = avro_long


def _bytes(value: bytes) -> bytes:
    return _long(len(value)) + value


def _string(value: str) -> bytes:
    try:
        return _bytes(value.encode())
    except UnicodeEncodeError:
        raise LocalProtocolError(f"key {value!r} is not valid UTF-8") from None


def _blocks(items: list[bytes]) -> bytes:
    out = bytearray()
    for start in range(0, len(items), GO_BLOCK_LENGTH):
        chunk = b"".join(items[start : start + GO_BLOCK_LENGTH])
        out += _long(-min(GO_BLOCK_LENGTH, len(items) - start)) + _long(len(chunk)) + chunk
    return bytes(out + _long(0))


def _map(entries: Iterable[tuple[str, bytes]]) -> bytes:
    return _blocks([_string(key) + value for key, value in sorted(entries)])


def _record(value: bytes = b"", count: int = 0, delete: bool = False,
            subbatch: bytes = ZERO_HASH) -> bytes:
    return _bytes(value) + _long(count) + (b"\x01" if delete else b"\x00") + subbatch


def _encode_batch(msg: Batch) -> bytes:
    # encode_message validates every field; the value is then written the reference's way.
    encode_message(msg)
    entries = [(k, _record(value=v)) for k, v in msg.values.items()]
    entries += [(k, _record(delete=True)) for k in msg.deletes]
    entries += [(k, _record(count=c)) for k, c in msg.counts.items()]
    entries += [(k, _record(subbatch=s)) for k, s in msg.subbatches.items()]
    weight = msg.weight.to_bytes((msg.weight.bit_length() + 7) // 8, "big")
    return _long(msg.number) + _bytes(weight) + msg.parent + _map(entries)


def _encode_sub_msg(msg: SubBatchMsg) -> bytes:
    deletes = _blocks([_string(key) for key in msg.deletes])
    return deletes + _map((k, _bytes(v)) for k, v in msg.updates.items())


def encode_message_go(msg: CardinalMessage) -> tuple[bytes, bytes]:
    """``(key, value)`` of ``msg`` as the Go reference writes it."""
    if isinstance(msg, Batch):
        return bytes((MessageType.BATCH,)) + msg.hash, _encode_batch(msg)
    key, value = encode_message(msg)
    if isinstance(msg, SubBatchMsg):
        return key, _encode_sub_msg(msg)
    return key, value


def go_sub_batch_messages(block: bytes, sub: SubBatch) -> list[SubBatchHeader | SubBatchMsg]:
    """The header and items of ``sub`` in the reference's chunking."""
    items: list[SubBatchHeader | SubBatchMsg] = []
    if sub.deletes:
        items.append(SubBatchMsg(block, sub.id, 0, tuple(sub.deletes), {}))
    for key, value in sorted(sub.updates):
        items.append(SubBatchMsg(block, sub.id, len(items), (), {key: value}))
    return [SubBatchHeader(block, sub.id, len(items)), *items]
