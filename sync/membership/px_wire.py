"""Peer exchange wire format (``/syncnode/px/1.0.0``), sans-IO.

One request frame, one answer frame, on a framed stream. Both are a list of signed peer records
(libp2p envelopes, opaque here): ``uvarint(count)`` then ``uvarint(len) bytes`` per record.
The request carries the asker's own record (so the answerer learns how to reach it too); the
answer carries the answerer's own record and up to ``px_max_records`` others.
"""

from __future__ import annotations

from sync.errors import RemoteProtocolError
from sync.varint import read_uvarint, uvarint

__all__ = ["decode_records", "encode_records"]


def encode_records(records: list[bytes]) -> bytes:
    return uvarint(len(records)) + b"".join(uvarint(len(r)) + r for r in records)


def decode_records(data: bytes, max_count: int, max_record_bytes: int) -> list[bytes]:
    """The records in ``data``; more than ``max_count`` records, one larger than
    ``max_record_bytes``, or anything malformed is a :class:`RemoteProtocolError`."""
    try:
        count, pos = read_uvarint(data, 0)
        if count > max_count:
            raise RemoteProtocolError(f"px: {count} records (limit {max_count})")
        out: list[bytes] = []
        for _ in range(count):
            size, pos = read_uvarint(data, pos)
            if size > max_record_bytes:
                raise RemoteProtocolError(f"px: record of {size} bytes (limit {max_record_bytes})")
            if pos + size > len(data):
                raise RemoteProtocolError("px: truncated record")
            out.append(bytes(data[pos:pos + size]))
            pos += size
    except ValueError as exc:
        raise RemoteProtocolError(f"px: bad varint: {exc}") from None
    if pos != len(data):
        raise RemoteProtocolError("px: trailing bytes")
    return out
