"""The bytes of a saved :class:`~sync.recon.buckets.BucketSummary` (the Recon key store's
in-memory part), so a node restarts from it instead of rescanning every key.

Layout (all integers unsigned LEB128 varints unless said otherwise)::

    b"RSUM" version load buckets total
    buckets x ( len(start) start count wide:64 bytes little-endian )
    sha256(everything before):32 bytes

``wide`` is the bucket's sum of :func:`~sync.recon.sha256a.wide_of` values, exactly (its 64-bit
slots carry, so a split can check a bucket read against it). The trailing digest makes a
damaged row fail to decode instead of restoring a wrong summary. The decoder refuses anything
over the limits it is given, every value out of range, and trailing bytes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from sync.errors import RemoteProtocolError
from sync.recon.sha256a import LANES, MASK32
from sync.varint import read_uvarint, uvarint

__all__ = ["SavedBuckets", "decode_summary", "encode_summary", "max_summary_bytes"]

_MAGIC = b"RSUM"
_VERSION = 1
_WIDE_BYTES = 64
_DIGEST_BYTES = 32
_SLOTS = struct.Struct(f"<{LANES * 2}I")
# One bucket at most: start length varint (2), count varint (9), the wide value.
_BUCKET_OVERHEAD = 2 + 9 + _WIDE_BYTES
_HEADER_MAX = len(_MAGIC) + 4 * 9
# Keys per bucket doubles with each merge: past 2^32 keys per bucket the log cannot be.
_MAX_LOAD = 1 << 32


@dataclass(frozen=True, slots=True)
class SavedBuckets:
    """A decoded summary: its effective bucket load and ``(start, count, wide)`` per bucket."""

    load: int
    buckets: list[tuple[bytes, int, int]]
    total: int


def max_summary_bytes(max_buckets: int, max_key_bytes: int) -> int:
    """The longest encoding of a summary of at most ``max_buckets`` buckets."""
    return _HEADER_MAX + max_buckets * (_BUCKET_OVERHEAD + max_key_bytes) + _DIGEST_BYTES


def encode_summary(load: int, starts: Sequence[bytes], counts: Sequence[int],
                   wides: Sequence[int]) -> bytes:
    """Encode a summary's buckets (as :class:`BucketSummary` holds them)."""
    parts = [_MAGIC, uvarint(_VERSION), uvarint(load), uvarint(len(starts)),
             uvarint(sum(counts))]
    for start, count, wide in zip(starts, counts, wides, strict=True):
        parts += (uvarint(len(start)), start, uvarint(count), wide.to_bytes(_WIDE_BYTES, "little"))
    body = b"".join(parts)
    return body + hashlib.sha256(body).digest()


def decode_summary(data: bytes, *, max_buckets: int, max_key_bytes: int) -> SavedBuckets:
    """Decode what :func:`encode_summary` wrote.

    :raises RemoteProtocolError: longer than a summary of ``max_buckets`` buckets can be, a
        wrong digest, version or magic, a start longer than ``max_key_bytes``, starts not
        ascending from ``b""``, a wide value its count cannot reach, counts not adding up to
        the total, or trailing bytes.
    """
    if len(data) > max_summary_bytes(max_buckets, max_key_bytes):
        raise RemoteProtocolError("saved summary longer than its limit")
    body, digest = data[:-_DIGEST_BYTES], data[-_DIGEST_BYTES:]
    if len(data) < len(_MAGIC) + _DIGEST_BYTES or hashlib.sha256(body).digest() != digest:
        raise RemoteProtocolError("saved summary digest mismatch")
    if body[: len(_MAGIC)] != _MAGIC:
        raise RemoteProtocolError("not a saved summary")
    version, pos = read_uvarint(body, len(_MAGIC))
    if version != _VERSION:
        raise RemoteProtocolError(f"saved summary version {version} unknown")
    load, pos = read_uvarint(body, pos)
    count_of, pos = read_uvarint(body, pos)
    total, pos = read_uvarint(body, pos)
    if not 1 <= load <= _MAX_LOAD or not 1 <= count_of <= max_buckets:
        raise RemoteProtocolError("saved summary load or bucket count out of range")
    buckets: list[tuple[bytes, int, int]] = []
    previous: bytes | None = None
    counted = 0
    for _ in range(count_of):
        size, pos = read_uvarint(body, pos)
        if size > max_key_bytes or pos + size + _WIDE_BYTES > len(body):
            raise RemoteProtocolError("saved summary bucket truncated or start too long")
        start = bytes(body[pos : pos + size])
        count, pos = read_uvarint(body, pos + size)
        if pos + _WIDE_BYTES > len(body):
            raise RemoteProtocolError("saved summary bucket truncated")
        raw = body[pos : pos + _WIDE_BYTES]
        pos += _WIDE_BYTES
        if (start != b"") if previous is None else not previous < start:
            raise RemoteProtocolError("saved summary starts do not ascend from b''")
        slots = _SLOTS.unpack(raw)
        # Each lane slot is a sum of ``count`` u32 values (the odd halves are its carries).
        if any(lo + (hi << 32) > count * MASK32 for lo, hi in zip(slots[0::2], slots[1::2],
                                                                    strict=True)):
            raise RemoteProtocolError("saved summary hash sum out of range for its count")
        buckets.append((start, count, int.from_bytes(raw, "little")))
        previous = start
        counted += count
    if pos != len(body):
        raise RemoteProtocolError("trailing bytes after the saved summary")
    if counted != total:
        raise RemoteProtocolError("saved summary counts do not add up to its total")
    return SavedBuckets(load, buckets, total)
