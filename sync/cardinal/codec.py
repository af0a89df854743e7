"""Wire codecs of the seven Cardinal Streams message types.

Every message is a partition key and a value. Keys are the concatenation of a prefix byte, the
32-byte block hash and, depending on the type, a 32-byte sub batch id, an Avro ``int`` index or
the application key (UTF-8). Values are Avro (fastavro, schemaless, with the spec's schemas
verbatim) except BatchMsg values (the application's raw bytes) and BatchDeleteMsg values (empty).

``decode_message`` is the only entry point for untrusted bytes: it enforces :class:`Limits` and
raises nothing but :class:`~sync.errors.RemoteProtocolError`.
"""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final

import fastavro

from sync.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "BATCH_SCHEMA",
    "DEFAULT_LIMITS",
    "HASH_SIZE",
    "SUBBATCH_SCHEMA",
    "ZERO_HASH",
    "Batch",
    "BatchDeleteMsg",
    "BatchMsg",
    "CardinalMessage",
    "Limits",
    "MessageType",
    "Reorg",
    "ReorgComplete",
    "SubBatchHeader",
    "SubBatchMsg",
    "decode_message",
    "encode_message",
]

HASH_SIZE: Final = 32
ZERO_HASH: Final = bytes(HASH_SIZE)
_MAX_LONG: Final = (1 << 63) - 1
_MAX_INT: Final = (1 << 31) - 1


class MessageType(IntEnum):
    """The prefix byte of every key."""

    BATCH = 0
    SUBBATCH_HEADER = 1
    SUBBATCH_MSG = 2
    BATCH_MSG = 3
    BATCH_DELETE_MSG = 4
    REORG = 5
    REORG_COMPLETE = 6


# The spec's schemas, verbatim. "avro.codec" is an attribute of the schema (the Go reference reads
# it as a hint for container files); it does not compress a schemaless value.
BATCH_SCHEMA: Final[dict[str, Any]] = {
    "type": "record",
    "name": "batch",
    "avro.codec": "snappy",
    "namespace": "cloud.rivet.cardinal",
    "fields": [
        {"name": "num", "type": "long"},
        {"name": "weight", "type": "bytes"},
        {"name": "parent", "type": {"name": "par", "type": "fixed", "size": 32}},
        {
            "name": "updates",
            "type": {
                "name": "upd",
                "type": "map",
                "values": {
                    "type": "record",
                    "name": "update",
                    "fields": [
                        {"name": "value", "type": "bytes"},
                        {"name": "count", "type": "int"},
                        {"name": "delete", "type": "boolean"},
                        {"name": "subbatch", "type": {"name": "subb", "type": "fixed", "size": 32}},
                    ],
                },
            },
        },
    ],
}

SUBBATCH_SCHEMA: Final[dict[str, Any]] = {
    "type": "record",
    "name": "update",
    "fields": [
        {"name": "delete", "type": {"name": "del", "type": "array", "items": "string"}},
        {"name": "updates", "type": {"name": "upd", "type": "map", "values": "bytes"}},
    ],
}

_BATCH = fastavro.parse_schema(BATCH_SCHEMA)
_SUBBATCH = fastavro.parse_schema(SUBBATCH_SCHEMA)
_INT = fastavro.parse_schema("int")
_LONG = fastavro.parse_schema("long")


@dataclass(frozen=True, slots=True)
class Limits:
    """Upper bounds enforced while decoding untrusted messages (all sizes in bytes)."""

    max_key: int = 4096
    max_value: int = 4 * 1024 * 1024
    max_batch_entries: int = 100_000
    max_count: int = 1_000_000
    max_subbatch_items: int = 1_000_000


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True, slots=True)
class Batch:
    """Key ``\\x00 hash``: the payload header.

    The Avro ``updates`` map is split by meaning: each entry is exactly one of an inline value, an
    inline delete, a message count for an application prefix, or a sub batch id.
    """

    hash: bytes
    number: int
    weight: int
    parent: bytes
    values: dict[str, bytes] = field(default_factory=dict)
    deletes: frozenset[str] = frozenset()
    counts: dict[str, int] = field(default_factory=dict)
    subbatches: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubBatchHeader:
    """Key ``\\x01 hash batch_id``, value Avro int: how many SubBatchMsgs the sub batch has."""

    hash: bytes
    batch_id: bytes
    item_count: int


@dataclass(frozen=True, slots=True)
class SubBatchMsg:
    """Key ``\\x02 hash batch_id avro-int(index)``, value the spec's ``update`` record."""

    hash: bytes
    batch_id: bytes
    index: int
    deletes: tuple[str, ...] = ()
    updates: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BatchMsg:
    """Key ``\\x03 hash app-key``, value the application's bytes."""

    hash: bytes
    key: str
    value: bytes


@dataclass(frozen=True, slots=True)
class BatchDeleteMsg:
    """Key ``\\x04 hash app-key``, empty value."""

    hash: bytes
    key: str


@dataclass(frozen=True, slots=True)
class Reorg:
    """Key ``\\x05 hash``, value Avro long: the common ancestor of a deep reorg."""

    hash: bytes
    number: int


@dataclass(frozen=True, slots=True)
class ReorgComplete:
    """Key ``\\x06 hash``, value Avro long: closes the reorg channel opened by :class:`Reorg`."""

    hash: bytes
    number: int


CardinalMessage = (
    Batch | SubBatchHeader | SubBatchMsg | BatchMsg | BatchDeleteMsg | Reorg | ReorgComplete
)


# ---------------------------------------------------------------------------------------------
# encoding


def _write(schema: Any, datum: Any) -> bytes:
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, schema, datum)
    except (ValueError, TypeError) as exc:  # e.g. a key that is not encodable as UTF-8
        raise LocalProtocolError(f"cannot encode as Avro: {exc}") from None
    return buf.getvalue()


def _utf8(key: str) -> bytes:
    try:
        return key.encode()
    except UnicodeEncodeError:
        raise LocalProtocolError(f"application key {key!r} is not valid UTF-8") from None


def _weight_bytes(weight: int) -> bytes:
    # Minimal big-endian, like Go's big.Int.Bytes(): zero is the empty string.
    return weight.to_bytes((weight.bit_length() + 7) // 8, "big")


def _update_record(
    value: bytes = b"", count: int = 0, delete: bool = False, subbatch: bytes = ZERO_HASH
) -> dict[str, Any]:
    return {"value": value, "count": count, "delete": delete, "subbatch": subbatch}


def _check_hash(name: str, value: bytes) -> None:
    if len(value) != HASH_SIZE:
        raise LocalProtocolError(f"{name} must be {HASH_SIZE} bytes, got {len(value)}")


def _encode_batch(msg: Batch) -> bytes:
    if not 0 <= msg.number <= _MAX_LONG:
        raise LocalProtocolError(f"block number out of range: {msg.number}")
    if not 0 <= msg.weight < 1 << 256:
        raise LocalProtocolError(f"block weight out of range: {msg.weight}")
    _check_hash("parent", msg.parent)
    entries: dict[str, dict[str, Any]] = {}
    for key, value in msg.values.items():
        entries[key] = _update_record(value=value)
    for key in msg.deletes:
        entries[key] = _update_record(delete=True)
    for key, count in msg.counts.items():
        if not 0 < count <= _MAX_INT:
            raise LocalProtocolError(f"count for prefix {key!r} out of range: {count}")
        entries[key] = _update_record(count=count)
    for key, batch_id in msg.subbatches.items():
        _check_hash("sub batch id", batch_id)
        if batch_id == ZERO_HASH:
            raise LocalProtocolError("a sub batch id must not be all zeros")
        entries[key] = _update_record(subbatch=batch_id)
    total = len(msg.values) + len(msg.deletes) + len(msg.counts) + len(msg.subbatches)
    if len(entries) != total:
        raise LocalProtocolError("a key appears twice in the Batch updates map")
    record = {
        "num": msg.number,
        "weight": _weight_bytes(msg.weight),
        "parent": msg.parent,
        # Sorted so that redundant producers emit byte-identical Batch values.
        "updates": dict(sorted(entries.items())),
    }
    return _write(_BATCH, record)


def avro_long(value: int) -> bytes:
    """An Avro ``long`` (zigzag varint); also the block counts and sizes of arrays and maps."""
    return _write(_LONG, value)


def _avro_int(value: int) -> bytes:
    if not 0 <= value <= _MAX_INT:
        raise LocalProtocolError(f"Avro int out of range: {value}")
    return _write(_INT, value)


def encode_message(msg: CardinalMessage) -> tuple[bytes, bytes]:
    """The ``(key, value)`` pair of ``msg``; raises LocalProtocolError for unencodable input."""
    _check_hash("block hash", msg.hash)
    if isinstance(msg, BatchMsg):
        return bytes((MessageType.BATCH_MSG,)) + msg.hash + _utf8(msg.key), msg.value
    if isinstance(msg, BatchDeleteMsg):
        return bytes((MessageType.BATCH_DELETE_MSG,)) + msg.hash + _utf8(msg.key), b""
    if isinstance(msg, Batch):
        return bytes((MessageType.BATCH,)) + msg.hash, _encode_batch(msg)
    if isinstance(msg, SubBatchHeader):
        _check_hash("sub batch id", msg.batch_id)
        key = bytes((MessageType.SUBBATCH_HEADER,)) + msg.hash + msg.batch_id
        return key, _avro_int(msg.item_count)
    if isinstance(msg, SubBatchMsg):
        _check_hash("sub batch id", msg.batch_id)
        key = bytes((MessageType.SUBBATCH_MSG,)) + msg.hash + msg.batch_id + _avro_int(msg.index)
        record = {"delete": list(msg.deletes), "updates": dict(sorted(msg.updates.items()))}
        return key, _write(_SUBBATCH, record)
    if isinstance(msg, Reorg | ReorgComplete):
        if not 0 <= msg.number <= _MAX_LONG:
            raise LocalProtocolError(f"block number out of range: {msg.number}")
        kind = MessageType.REORG if isinstance(msg, Reorg) else MessageType.REORG_COMPLETE
        return bytes((kind,)) + msg.hash, _write(_LONG, msg.number)
    raise LocalProtocolError(f"not a Cardinal message: {type(msg).__name__}")


# ---------------------------------------------------------------------------------------------
# decoding (untrusted input)


def _read(schema: Any, data: bytes, what: str) -> Any:
    buf = io.BytesIO(data)
    try:
        result = fastavro.schemaless_reader(buf, schema, None)
    except Exception as exc:  # fastavro raises EOFError, IndexError, ValueError, ... on garbage
        raise RemoteProtocolError(f"malformed {what}: {type(exc).__name__}") from exc
    if buf.tell() != len(data):
        raise RemoteProtocolError(f"malformed {what}: {len(data) - buf.tell()} trailing bytes")
    return result


def _read_int(data: bytes, what: str, maximum: int) -> int:
    value: int = _read(_INT, data, what)
    if not 0 <= value <= maximum:
        raise RemoteProtocolError(f"{what} out of range: {value}")
    return value


def _decode_batch(block_hash: bytes, value: bytes, limits: Limits) -> Batch:
    raw = _read(_BATCH, value, "Batch")
    number = raw["num"]
    if number < 0:
        raise RemoteProtocolError(f"Batch number is negative: {number}")
    weight_bytes = raw["weight"]
    if len(weight_bytes) > HASH_SIZE:
        raise RemoteProtocolError("Batch weight is wider than 256 bits")
    updates = raw["updates"]
    if len(updates) > limits.max_batch_entries:
        raise RemoteProtocolError(f"Batch has {len(updates)} update entries")
    values: dict[str, bytes] = {}
    deletes: set[str] = set()
    counts: dict[str, int] = {}
    subbatches: dict[str, bytes] = {}
    for key, rec in updates.items():
        value_, count, delete, sub = rec["value"], rec["count"], rec["delete"], rec["subbatch"]
        if sub != ZERO_HASH:
            if value_ or count or delete:
                raise RemoteProtocolError(f"Batch entry {key!r} mixes a sub batch with data")
            subbatches[key] = sub
        elif count:
            if value_ or delete:
                raise RemoteProtocolError(f"Batch entry {key!r} mixes a count with data")
            if not 0 < count <= limits.max_count:
                raise RemoteProtocolError(f"Batch count for {key!r} out of range: {count}")
            counts[key] = count
        elif delete:
            if value_:
                raise RemoteProtocolError(f"Batch entry {key!r} is both a value and a delete")
            deletes.add(key)
        else:
            values[key] = value_
    if len(set(subbatches.values())) != len(subbatches):
        raise RemoteProtocolError("Batch names one sub batch id twice")
    prefixes = sorted(counts)
    for shorter, longer in itertools.pairwise(prefixes):
        if longer.startswith(shorter):
            # A BatchMsg key could then belong to either counter; no consumer can decide.
            raise RemoteProtocolError(f"Batch prefixes overlap: {shorter!r}, {longer!r}")
    return Batch(
        block_hash,
        number,
        int.from_bytes(weight_bytes, "big"),
        raw["parent"],
        values,
        frozenset(deletes),
        counts,
        subbatches,
    )


def _decode_subbatch_msg(key: bytes, value: bytes, limits: Limits) -> SubBatchMsg:
    index = _read_int(key[65:], "SubBatchMsg index", limits.max_subbatch_items - 1)
    if _avro_int(index) != key[65:]:
        # Two spellings of one index would defeat duplicate detection.
        raise RemoteProtocolError("SubBatchMsg index is not canonically encoded")
    raw = _read(_SUBBATCH, value, "SubBatchMsg")
    return SubBatchMsg(key[1:33], key[33:65], index, tuple(raw["delete"]), raw["updates"])


def _decode_app_key(key: bytes) -> str:
    try:
        return key[33:].decode()
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError("application key is not UTF-8") from exc


def decode_message(key: bytes, value: bytes, limits: Limits = DEFAULT_LIMITS) -> CardinalMessage:
    """Parse one message; any malformed or oversized input raises RemoteProtocolError."""
    if len(key) < 1 + HASH_SIZE:
        raise RemoteProtocolError(f"key too short: {len(key)} bytes")
    if len(key) > limits.max_key:
        raise RemoteProtocolError(f"key too long: {len(key)} bytes")
    if len(value) > limits.max_value:
        raise RemoteProtocolError(f"value too long: {len(value)} bytes")
    kind = key[0]
    if kind == MessageType.BATCH_MSG:
        return BatchMsg(key[1:33], _decode_app_key(key), value)
    if kind == MessageType.BATCH_DELETE_MSG:
        if value:
            raise RemoteProtocolError("BatchDeleteMsg value must be empty")
        return BatchDeleteMsg(key[1:33], _decode_app_key(key))
    if kind == MessageType.SUBBATCH_MSG:
        if len(key) < 1 + 2 * HASH_SIZE + 1:
            raise RemoteProtocolError("SubBatchMsg key too short")
        return _decode_subbatch_msg(key, value, limits)
    if kind == MessageType.BATCH:
        if len(key) != 1 + HASH_SIZE:
            raise RemoteProtocolError("Batch key must be the prefix byte and the hash")
        return _decode_batch(key[1:], value, limits)
    if kind == MessageType.SUBBATCH_HEADER:
        if len(key) != 1 + 2 * HASH_SIZE:
            raise RemoteProtocolError("SubBatchHeader key must be prefix, hash and batch id")
        count = _read_int(value, "SubBatchHeader item count", limits.max_subbatch_items)
        return SubBatchHeader(key[1:33], key[33:], count)
    if kind in (MessageType.REORG, MessageType.REORG_COMPLETE):
        if len(key) != 1 + HASH_SIZE:
            raise RemoteProtocolError("Reorg key must be the prefix byte and the hash")
        number: int = _read(_LONG, value, "Reorg number")
        if number < 0:
            raise RemoteProtocolError(f"Reorg number is negative: {number}")
        cls = Reorg if kind == MessageType.REORG else ReorgComplete
        return cls(key[1:], number)
    raise RemoteProtocolError(f"unknown message type {kind}")
