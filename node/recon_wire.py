"""Frames of ``/syncnode/recon/1.0.0`` around the sans-IO Recon messages.

Every frame starts with a tag byte:

- ``RECON``: one Recon message (``sync.recon`` wire format), during reconciliation;
- ``WANT`` / ``WANT_LAST``: keys whose events the sender wants (varint length + key, repeated);
- ``EVENTS`` / ``EVENTS_LAST``: canonical signed events answering a WANT (varint length + wire).

After reconciliation the initiator sends its WANT frames (each answered by EVENTS frames ending
with EVENTS_LAST); after its WANT_LAST has been answered the responder does the same.
"""

from __future__ import annotations

__all__ = [
    "EVENTS",
    "EVENTS_LAST",
    "RECON",
    "WANT",
    "WANT_LAST",
    "FrameDecodeError",
    "pack_items",
    "pack_list",
    "unpack_items",
]

RECON = 1
WANT = 2
WANT_LAST = 3
EVENTS = 4
EVENTS_LAST = 5


class FrameDecodeError(ValueError):
    pass


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def pack_list(items: list[bytes]) -> bytes:
    """Items, each behind its uvarint length."""
    return b"".join(_varint(len(i)) + i for i in items)


def pack_items(tag: int, items: list[bytes]) -> bytes:
    return bytes([tag]) + pack_list(items)


def unpack_items(body: bytes, *, max_items: int, max_item_bytes: int) -> list[bytes]:
    items: list[bytes] = []
    pos = 0
    while pos < len(body):
        length = shift = 0
        while True:
            if pos >= len(body) or shift > 28:
                raise FrameDecodeError("truncated or oversized length prefix")
            byte = body[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if length > max_item_bytes or pos + length > len(body):
            raise FrameDecodeError("item too large or truncated")
        items.append(body[pos : pos + length])
        pos += length
        if len(items) > max_items:
            raise FrameDecodeError(f"more than {max_items} items in one frame")
    return items
