"""Record files built in two halves: the items first, the running-hash frame later (pure).

A v6 record file is ``version ‖ RecordStreamFile`` and protobuf writes a message's fields in
field-number order, so its bytes are three independent pieces::

    head  = version, hapi_proto_version (1), start_object_running_hash (2)
    body  = record_stream_items (3), one length-delimited field per item
    tail  = end_object_running_hash (4), block_number (5), sidecars (6)

Only ``head`` and ``tail`` depend on the hash chain. A batch job therefore encodes a block's
items (``BlockBody``: body bytes, item hashes, the sidecar file) wherever the events are,
before anyone knows where the chain stands; once the item hashes are folded in order, the file
is ``frame_record_file(head, body, tail)``: no item is encoded twice. A test checks the result is
byte-identical to ``assemble_block``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sync.errors import LocalProtocolError
from sync.recordstream import record_stream_pb2 as pb
from sync.recordstream.codec import DEFAULT_LIMITS
from sync.recordstream.hashing import (
    HASH_LEN,
    RECORD_FILE_VERSION,
    fold_running_hash,
    hash_object,
    item_hash,
    sha384,
)
from sync.recordstream.writer import SYNCNODE_FORMAT_VERSION
from sync.varint import uvarint

__all__ = ["SIDECAR_ID", "BlockBody", "encode_delivery", "encode_record", "fold_item_hashes",
           "frame_record_file"]

SIDECAR_ID = 1
_ITEMS_TAG = b"\x1a"  # RecordStreamFile.record_stream_items: field 3, length-delimited
_SIDECAR_TAG = b"\x0a"  # SidecarFile.sidecar_records: field 1, length-delimited
_WIRE_TAG = b"\x0a"  # RecordStreamItem.transaction: field 1
_RECORD_TAG = b"\x12"  # RecordStreamItem.record: field 2
# SyncnodeRecord.event and TransactionSidecarRecord.syncnode_delivery: field 1000, length-delimited
_FIELD_1000 = bytes([(1000 << 3 | 2) & 0x7F | 0x80, (1000 << 3 | 2) >> 7])
_U64 = (1 << 64) - 1
_NS = 1_000_000_000


def _field(tag: bytes, data: bytes) -> bytes:
    # proto3 leaves an empty bytes/string field out, as SerializeToString does.
    return tag + uvarint(len(data)) + data if data else b""


def _message(tag: bytes, data: bytes) -> bytes:
    # A set sub-message is written even when empty.
    return tag + uvarint(len(data)) + data


def _uint(tag: bytes, value: int) -> bytes:
    # Scalars equal to zero are left out; negative int64 values are 10-byte varints.
    return tag + uvarint(value & _U64) if value else b""


def _timestamp(consensus_ns: int) -> bytes:
    seconds, nanos = divmod(consensus_ns, _NS)
    return _uint(b"\x08", seconds) + _uint(b"\x10", nanos)


def encode_record(wire: bytes, consensus_ns: int, message_id: str, channel: str, sender: str,
                  lamport: int) -> bytes:
    """``SyncnodeRecord`` bytes, as ``events.event_record`` serializes them (hand-encoded:
    this runs once per event; a test compares the two)."""
    info = (_field(b"\x0a", message_id.encode()) + _field(b"\x12", channel.encode())
            + _field(b"\x1a", sender.encode()) + _uint(b"\x20", lamport))
    return (_field(b"\x12", sha384(wire)) + _message(b"\x1a", _timestamp(consensus_ns))
            + _message(_FIELD_1000, info))


def encode_delivery(consensus_ns: int, message_id: str, seq: int, received_at_ms: int) -> bytes:
    """``TransactionSidecarRecord`` bytes of an event's SYNCNODE_DELIVERY sidecar record."""
    delivery = (_field(b"\x0a", message_id.encode()) + _uint(b"\x10", seq)
                + _uint(b"\x18", received_at_ms))
    return _message(b"\x0a", _timestamp(consensus_ns)) + _message(_FIELD_1000, delivery)


@dataclass
class BlockBody:
    """One block's items, encoded: what a task builds before the chain reaches its block.

    ``add`` takes events in consensus order. ``body`` is the record_stream_items section,
    ``hashes`` the concatenated 48-byte item hashes (the fold's input), ``sidecar`` the
    uncompressed SidecarFile (empty without sidecars).
    """

    sidecars: bool
    count: int = 0
    first_ns: int = -1
    size: int = 0
    _body: list[bytes] = field(default_factory=list)
    _hashes: list[bytes] = field(default_factory=list)
    _sidecar: list[bytes] = field(default_factory=list)

    def add(self, seq: int, message_id: str, channel: str, sender: str, lamport: int,
            wire: bytes, received_at_ms: int, consensus_ns: int) -> None:
        record = encode_record(wire, consensus_ns, message_id, channel, sender, lamport)
        item = _field(_WIRE_TAG, wire) + _field(_RECORD_TAG, record)
        encoded = _ITEMS_TAG + uvarint(len(item)) + item
        self.size += len(encoded)
        if self.size > DEFAULT_LIMITS.max_uncompressed:
            # Never write what our own reader refuses: lower max_events_per_file instead.
            raise LocalProtocolError(f"record file over {DEFAULT_LIMITS.max_uncompressed} bytes")
        self._body.append(encoded)
        self._hashes.append(item_hash(record, wire))
        if self.sidecars:
            side = encode_delivery(consensus_ns, message_id, seq, received_at_ms)
            self._sidecar.append(_SIDECAR_TAG + uvarint(len(side)) + side)
        if self.count == 0:
            self.first_ns = consensus_ns
        self.count += 1

    @property
    def body(self) -> bytes:
        return b"".join(self._body)

    @property
    def hashes(self) -> bytes:
        return b"".join(self._hashes)

    @property
    def sidecar(self) -> bytes:
        return b"".join(self._sidecar)


def fold_item_hashes(start: bytes, hashes: bytes) -> bytes:
    """The running hash after folding concatenated 48-byte item hashes into ``start``."""
    if len(hashes) % HASH_LEN:
        raise LocalProtocolError("item hashes are not a multiple of 48 bytes")
    running = start
    for offset in range(0, len(hashes), HASH_LEN):
        running = fold_running_hash(running, hashes[offset:offset + HASH_LEN])
    return running


def frame_record_file(body: bytes, start: bytes, end: bytes, block_number: int,
                      sidecar_hash: bytes | None, *,
                      version: tuple[int, int, int] = SYNCNODE_FORMAT_VERSION) -> bytes:
    """The uncompressed record file around an encoded ``body`` (gzip it for the .rcd.gz)."""
    hapi = pb.SemanticVersion(major=version[0], minor=version[1], patch=version[2])
    head = pb.RecordStreamFile(hapi_proto_version=hapi,
                               start_object_running_hash=hash_object(start))
    tail = pb.RecordStreamFile(end_object_running_hash=hash_object(end), block_number=block_number)
    if sidecar_hash is not None:
        tail.sidecars.append(pb.SidecarMetadata(hash=hash_object(sidecar_hash), id=SIDECAR_ID,
                                                types=[pb.SYNCNODE_DELIVERY]))
    raw = (RECORD_FILE_VERSION.to_bytes(4, "big") + head.SerializeToString(deterministic=True)
           + body + tail.SerializeToString(deterministic=True))
    if len(raw) > DEFAULT_LIMITS.max_uncompressed:
        raise LocalProtocolError(f"record file of {len(raw)} bytes exceeds the reader limit")
    return raw
