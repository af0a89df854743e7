"""What ``syncnode records show`` prints about one record, sidecar or signature file.

:func:`read_limited` reads a file (never more than its format allows); each ``describe_*``
decodes a file's bytes (with ``sync.recordstream``, which raises
``RemoteProtocolError`` for anything malformed) into a plain dict for JSON or for
:func:`print_description`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.recordstream import (
    DEFAULT_LIMITS,
    SIGNATURE_FIELDS,
    decode_record_file,
    decode_sidecar_file,
    decode_signature_file,
    decode_syncnode_record,
    file_hash,
    format_instant,
    item_hash,
    metadata_hash,
    record_consensus_ns,
    sidecar_file_name,
    sidecar_type_of,
)
from sync.recordstream import record_stream_pb2 as pb

__all__ = [
    "Failure",
    "abbreviate_hex",
    "describe_record",
    "describe_sidecar",
    "describe_signature",
    "print_description",
    "read_limited",
    "short_hashes",
]


class Failure(Exception):
    """A one-line error for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int) -> None:
        self.code = code
        super().__init__(message)


def read_limited(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes, so that the decoder reports an oversized file by itself."""
    try:
        with path.open("rb") as handle:
            return handle.read(limit + 1)
    except OSError as exc:
        raise Failure(f"{path}: cannot read ({exc.strerror or exc})", 2) from None


def _instant(ns: int) -> str:
    try:
        return format_instant(ns).replace("_", ":")
    except LocalProtocolError:
        return f"{ns} ns (not a representable instant)"


def describe_record(path: Path, data: bytes) -> dict[str, Any]:
    parsed = decode_record_file(data, str(path))
    msg = parsed.message
    hapi = msg.hapi_proto_version
    start, end = msg.start_object_running_hash.hash, msg.end_object_running_hash.hash
    items = []
    for index, item in enumerate(msg.record_stream_items):
        entry: dict[str, Any] = {
            "index": index,
            "record_bytes": len(item.record),
            "transaction_bytes": len(item.transaction),
            "item_hash": item_hash(item.record, item.transaction).hex(),
        }
        try:
            ns = record_consensus_ns(item.record, str(path))
            ours = decode_syncnode_record(item.record, str(path))
        except RemoteProtocolError as exc:
            entry["record_error"] = exc.reason
        else:
            entry["consensus_ns"] = ns
            entry["consensus"] = _instant(ns)
            if ours is not None:
                entry["event"] = {
                    "message_id": ours.event.message_id,
                    "channel": ours.event.channel,
                    "sender": ours.event.sender,
                    "lamport": ours.event.lamport,
                }
        items.append(entry)
    sidecars = [_show_sidecar_meta(path, meta) for meta in msg.sidecars]
    return {
        "kind": "record",
        "path": str(path),
        "version": 6,
        "hapi_proto_version": f"{hapi.major}.{hapi.minor}.{hapi.patch}",
        "block_number": msg.block_number,
        "file_hash": file_hash(parsed.uncompressed).hex(),
        "metadata_hash": metadata_hash(hapi, start, end, msg.block_number).hex(),
        "start_running_hash": start.hex(),
        "end_running_hash": end.hex(),
        "items": items,
        "sidecars": sidecars,
    }


def _show_sidecar_meta(record_path: Path, meta: pb.SidecarMetadata) -> dict[str, Any]:
    side_path = record_path.parent / "sidecar" / sidecar_file_name(record_path.name, meta.id)
    entry: dict[str, Any] = {
        "id": meta.id,
        "types": [_enum_name(pb.SidecarType, t) for t in meta.types],
        "hash": meta.hash.hash.hex(),
        "file": str(side_path),
    }
    if side_path.is_file():
        try:
            data = read_limited(side_path, DEFAULT_LIMITS.max_compressed)
            entry["records"] = describe_sidecar(side_path, data)["records"]
        except RemoteProtocolError as exc:
            entry["error"] = exc.reason
    else:
        entry["error"] = "sidecar file not found"
    return entry


def describe_sidecar(path: Path, data: bytes) -> dict[str, Any]:
    side = decode_sidecar_file(data, str(path))
    records = []
    for record in side.message.sidecar_records:
        ts = record.consensus_timestamp
        kind = sidecar_type_of(record)
        entry: dict[str, Any] = {
            "consensus": _instant(ts.seconds * 1_000_000_000 + ts.nanos),
            "type": _enum_name(pb.SidecarType, kind) if kind is not None else "unknown",
            "bytes": record.ByteSize(),
        }
        if record.HasField("syncnode_delivery"):
            d = record.syncnode_delivery
            entry["delivery"] = {
                "message_id": d.message_id,
                "seq": d.seq,
                "received_at_ms": d.received_at_ms,
            }
        records.append(entry)
    return {"kind": "sidecar", "path": str(path), "records": records}


def describe_signature(path: Path, data: bytes) -> dict[str, Any]:
    sig = decode_signature_file(data, str(path))
    out: dict[str, Any] = {"kind": "signature", "path": str(path), "version": 6}
    for field, _signed in SIGNATURE_FIELDS:
        if sig.HasField(field):
            obj: pb.SignatureObject = getattr(sig, field)
            out[field] = {
                "type": _enum_name(pb.SignatureType, obj.type),
                "length": obj.length,
                "checksum": obj.checksum,
                "signed_hash": obj.hash_object.hash.hex(),
                "signature": obj.signature.hex(),
            }
    return out


def _enum_name(enum: Any, value: int) -> str:
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


# A hash or signature in hex: SHA-384 is 96 digits, an RSA-3072 signature 768. On a terminal
# the first 16 stand for it (as git abbreviates commits); --full, --json or a pipe keep it all.
# Message ids (64 digits, what a user looks up) stay whole.
_LONG_HEX = re.compile(r"\b([0-9a-f]{16})[0-9a-f]{49,}\b")


def abbreviate_hex(text: str) -> str:
    """``text`` with every hex run longer than 64 digits cut to its first 16 and ``…``."""
    return _LONG_HEX.sub(r"\1…", text)


def short_hashes(args: argparse.Namespace) -> bool:
    """Abbreviate hashes: stdout is a terminal, and neither --full nor --json was given."""
    return not (args.full or args.json) and sys.stdout.isatty()


def print_description(info: dict[str, Any], indent: str = "", *, short: bool = False) -> None:
    for key, value in info.items():
        if isinstance(value, list) and all(isinstance(entry, dict) for entry in value):
            print(f"{indent}{key}: {len(value)}")
            for number, entry in enumerate(value):
                print(f"{indent}  [{number}]")
                print_description(entry, indent + "    ", short=short)
        elif isinstance(value, list):
            print(f"{indent}{key}: {', '.join(map(str, value))}")
        elif isinstance(value, dict):
            print(f"{indent}{key}:")
            print_description(value, indent + "  ", short=short)
        else:
            text = str(value)
            print(f"{indent}{key}: {abbreviate_hex(text) if short else text}")
