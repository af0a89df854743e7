"""Unsigned LEB128 varints (multiformats ``uvarint``, protobuf varints): the one implementation.

Every length prefix, event id field, batch item and Cardinal envelope in syncnode uses these.
Reading accepts only minimal encodings (a trailing ``0x00`` byte is refused), so that one value
has one byte string: event ids are compared and hashed as bytes, and a peer must not be able
to make two ids of one event.
"""

from __future__ import annotations

from sync.errors import RemoteProtocolError

__all__ = ["MAX_UVARINT_BYTES", "read_uvarint", "uvarint", "uvarint_prefix"]

# 9 bytes carry 63 bits: every length, height and code point we read fits.
MAX_UVARINT_BYTES = 9


def _encode_loop(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Lengths and small numbers are below 2^14 and are written many times per event (the record
# stream writes ~20 per event): a table lookup instead of a loop.
_SMALL = tuple(_encode_loop(v) for v in range(1 << 14))


def uvarint(value: int) -> bytes:
    """The minimal unsigned LEB128 encoding of ``value``."""
    if value < 0:
        raise ValueError("varint of a negative number")
    return _SMALL[value] if value < 16384 else _encode_loop(value)


def read_uvarint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """``(value, next position)`` of the varint at ``data[pos:]``.

    :raises RemoteProtocolError: truncated, non-minimal or longer than 9 bytes.
    """
    value = 0
    for i in range(MAX_UVARINT_BYTES):
        if pos + i >= len(data):
            raise RemoteProtocolError("truncated varint")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if byte == 0 and i > 0:
                raise RemoteProtocolError("non-minimal varint")
            return value, pos + i + 1
    raise RemoteProtocolError("varint too long")


def uvarint_prefix(buf: bytes | bytearray | memoryview, max_value: int) -> tuple[int, int] | None:
    """Parse a length prefix at the start of a buffer that may hold only part of it.

    Returns ``(value, prefix_length)``, or ``None`` while the prefix is incomplete. Raises
    :class:`RemoteProtocolError` for a non-minimal or overlong varint and for a value above
    ``max_value`` as early as the bytes seen so far allow, so a reader never waits for (or
    buffers) a frame it will refuse.
    """
    value = 0
    for i, byte in enumerate(buf[:MAX_UVARINT_BYTES]):
        value |= (byte & 0x7F) << (7 * i)
        if value > max_value:
            raise RemoteProtocolError(f"frame longer than the {max_value}-byte limit")
        if not byte & 0x80:
            if byte == 0 and i > 0:
                raise RemoteProtocolError("non-minimal length prefix")
            return value, i + 1
    if len(buf) >= MAX_UVARINT_BYTES:
        raise RemoteProtocolError("length prefix is not a valid uvarint")
    return None
