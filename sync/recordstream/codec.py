"""Bytes <-> messages for the three v6 file kinds, with size limits and typed errors.

Every decoder raises only ``RemoteProtocolError`` whose ``peer`` is the file name and whose
``reason`` says which step failed ("gzip truncated", "wrong version 5", ...). Encoders are
deterministic: protobuf deterministic serialization and gzip with a zero mtime and no file name.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from sync.errors import RemoteProtocolError
from sync.recordstream import record_stream_pb2 as pb
from sync.recordstream.hashing import HASH_LEN, RECORD_FILE_VERSION

__all__ = [
    "DEFAULT_LIMITS",
    "SIGNATURE_FILE_VERSION",
    "Limits",
    "RecordFile",
    "SidecarFileData",
    "decode_record_file",
    "decode_sidecar_file",
    "decode_signature_file",
    "decode_syncnode_record",
    "encode_record_file",
    "encode_sidecar_file",
    "encode_signature_file",
    "gunzip_limited",
    "gzip_deterministic",
    "record_consensus_ns",
    "sidecar_type_of",
]

SIGNATURE_FILE_VERSION = 6
_CHUNK = 1 << 16
_M = TypeVar("_M", bound=Message)
_SIDECAR_TYPES: dict[str, pb.SidecarType] = {
    "state_changes": pb.CONTRACT_STATE_CHANGE,
    "actions": pb.CONTRACT_ACTION,
    "bytecode": pb.CONTRACT_BYTECODE,
    "syncnode_delivery": pb.SYNCNODE_DELIVERY,
}


@dataclass(frozen=True)
class Limits:
    """Upper bounds on what a reader accepts; a gzip bomb stops at ``max_uncompressed``."""

    max_compressed: int = 64 << 20
    max_uncompressed: int = 256 << 20
    max_signature_file: int = 64 << 10


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, eq=False)
class RecordFile:
    """A decoded record file; ``uncompressed`` is what the file hash covers."""

    uncompressed: bytes
    message: pb.RecordStreamFile


@dataclass(frozen=True, eq=False)
class SidecarFileData:
    uncompressed: bytes
    message: pb.SidecarFile


def gzip_deterministic(data: bytes) -> bytes:
    """gzip with a fixed header (mtime 0, no name) so equal input gives equal output."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def gunzip_limited(data: bytes, name: str, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """Decompress one gzip member, refusing more than ``limits.max_uncompressed`` bytes."""
    if len(data) > limits.max_compressed:
        raise RemoteProtocolError(f"compressed size {len(data)} over limit", name)
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = bytearray()
    pending = data
    try:
        while not inflater.eof:
            room = limits.max_uncompressed - len(out)
            chunk = inflater.decompress(pending, min(_CHUNK, room + 1))
            out += chunk
            if len(out) > limits.max_uncompressed:
                raise RemoteProtocolError(
                    f"gzip expands beyond {limits.max_uncompressed} bytes", name
                )
            # zlib may hold output back even when all input is consumed, so only "no input left
            # and no output produced" means the stream is cut short.
            if not chunk and not inflater.unconsumed_tail:
                break
            pending = inflater.unconsumed_tail
    except zlib.error as exc:
        raise RemoteProtocolError(f"gzip corrupt: {exc}", name) from None
    if not inflater.eof:
        raise RemoteProtocolError("gzip truncated", name)
    if inflater.unused_data:
        raise RemoteProtocolError("trailing bytes after gzip stream", name)
    return bytes(out)


def _parse(message: _M, data: bytes, what: str, name: str) -> _M:
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError, RecursionError) as exc:
        raise RemoteProtocolError(f"{what} protobuf invalid: {exc}", name) from None
    return message


def _check_hash_object(obj: pb.HashObject, what: str, name: str) -> None:
    if obj.algorithm != pb.SHA_384 or obj.length != HASH_LEN or len(obj.hash) != HASH_LEN:
        raise RemoteProtocolError(
            f"{what} is not a SHA-384 hash object "
            f"(algorithm {obj.algorithm}, length {obj.length}, {len(obj.hash)} bytes)",
            name,
        )


def decode_record_file(data: bytes, name: str, limits: Limits = DEFAULT_LIMITS) -> RecordFile:
    """gzip( int32BE version 6 ‖ RecordStreamFile ) -> RecordFile, structure checked."""
    raw = gunzip_limited(data, name, limits)
    if len(raw) < 4:
        raise RemoteProtocolError("record file shorter than its version", name)
    version = int.from_bytes(raw[:4], "big", signed=True)
    if version != RECORD_FILE_VERSION:
        raise RemoteProtocolError(f"wrong version {version}, expected 6", name)
    message = _parse(pb.RecordStreamFile(), raw[4:], "RecordStreamFile", name)
    if not message.HasField("hapi_proto_version"):
        raise RemoteProtocolError("hapi_proto_version missing", name)
    _check_hash_object(message.start_object_running_hash, "start_object_running_hash", name)
    _check_hash_object(message.end_object_running_hash, "end_object_running_hash", name)
    if not message.record_stream_items:
        raise RemoteProtocolError("record file has no items", name)
    # A negative block_number is not malformed: files written while a network upgraded from v5
    # to v6 carry one, and the mirror node reads them. The verifier reports it as a finding.
    ids = [sidecar.id for sidecar in message.sidecars]
    if len(set(ids)) != len(ids) or any(i < 1 for i in ids):
        raise RemoteProtocolError(f"sidecar ids invalid: {ids}", name)
    for sidecar in message.sidecars:
        _check_hash_object(sidecar.hash, f"sidecar {sidecar.id} hash", name)
    return RecordFile(raw, message)


def encode_record_file(message: pb.RecordStreamFile) -> bytes:
    """The uncompressed record file bytes (gzip them with ``gzip_deterministic``)."""
    return RECORD_FILE_VERSION.to_bytes(4, "big") + message.SerializeToString(deterministic=True)


def decode_sidecar_file(data: bytes, name: str, limits: Limits = DEFAULT_LIMITS) -> SidecarFileData:
    """gzip( SidecarFile ), no version prefix."""
    raw = gunzip_limited(data, name, limits)
    return SidecarFileData(raw, _parse(pb.SidecarFile(), raw, "SidecarFile", name))


def encode_sidecar_file(message: pb.SidecarFile) -> bytes:
    return message.SerializeToString(deterministic=True)


def decode_signature_file(
    data: bytes, name: str, limits: Limits = DEFAULT_LIMITS
) -> pb.SignatureFile:
    """ONE version byte 6 ‖ SignatureFile, not compressed."""
    if len(data) > limits.max_signature_file:
        raise RemoteProtocolError(f"signature file size {len(data)} over limit", name)
    if not data:
        raise RemoteProtocolError("signature file empty", name)
    if data[0] != SIGNATURE_FILE_VERSION:
        raise RemoteProtocolError(f"wrong version {data[0]}, expected 6", name)
    message = _parse(pb.SignatureFile(), data[1:], "SignatureFile", name)
    if not message.HasField("file_signature") or not message.HasField("metadata_signature"):
        raise RemoteProtocolError("file or metadata signature missing", name)
    for field in ("file_signature", "metadata_signature"):
        _check_hash_object(getattr(message, field).hash_object, f"{field} hash_object", name)
    return message


def encode_signature_file(message: pb.SignatureFile) -> bytes:
    return bytes([SIGNATURE_FILE_VERSION]) + message.SerializeToString(deterministic=True)


def record_consensus_ns(record_bytes: bytes, name: str) -> int:
    """Consensus time (ns since the epoch) of a serialized TransactionRecord (field 3)."""
    header = _parse(pb.TransactionRecordHeader(), record_bytes, "TransactionRecord", name)
    if not header.HasField("consensus_timestamp"):
        raise RemoteProtocolError("TransactionRecord has no consensus timestamp", name)
    ts = header.consensus_timestamp
    if not 0 <= ts.nanos < 1_000_000_000:
        raise RemoteProtocolError(f"consensus nanos {ts.nanos} out of range", name)
    return ts.seconds * 1_000_000_000 + ts.nanos


def decode_syncnode_record(record_bytes: bytes, name: str) -> pb.SyncnodeRecord | None:
    """Our record of an item, or None for a record (e.g. Hedera's) without our event field."""
    record = _parse(pb.SyncnodeRecord(), record_bytes, "TransactionRecord", name)
    return record if record.HasField("event") else None


def sidecar_type_of(record: pb.TransactionSidecarRecord) -> pb.SidecarType | None:
    """The SidecarType of a sidecar record's payload; None for an empty or unknown payload."""
    return _SIDECAR_TYPES.get(record.WhichOneof("sidecar_records") or "")
