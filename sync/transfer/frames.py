"""Frames of ``/syncnode/recon/1.0.0`` around the sans-IO Recon messages.

Every frame starts with a tag byte:

- ``RECON``: one Recon message (``sync.recon`` wire format), during reconciliation;
- ``WANT`` / ``WANT_LAST``: keys whose events the sender wants (varint length + key, repeated);
- ``EVENTS`` / ``EVENTS_LAST``: canonical signed events answering a WANT (varint length + wire).

- ``BUSY``: the responder's only frame when it declines the session because it is already
  syncing with the initiator (see ``docs/node.md``, "Recon sessions").

After reconciliation the initiator sends its WANT frames (each answered by EVENTS frames ending
with EVENTS_LAST); after its WANT_LAST has been answered the responder does the same.
"""

from __future__ import annotations

from sync.errors import RemoteProtocolError
from sync.varint import read_uvarint, uvarint

__all__ = [
    "BUSY",
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
BUSY = 6


class FrameDecodeError(RemoteProtocolError):
    """A frame of items that does not decode within its limits."""


def pack_list(items: list[bytes]) -> bytes:
    """Items, each behind its uvarint length."""
    return b"".join(uvarint(len(i)) + i for i in items)


def pack_items(tag: int, items: list[bytes]) -> bytes:
    return bytes([tag]) + pack_list(items)


def unpack_items(body: bytes, *, max_items: int, max_item_bytes: int) -> list[bytes]:
    items: list[bytes] = []
    pos = 0
    while pos < len(body):
        try:
            length, pos = read_uvarint(body, pos)
        except RemoteProtocolError as exc:
            raise FrameDecodeError(exc.reason) from None
        if length > max_item_bytes or pos + length > len(body):
            raise FrameDecodeError("item too large or truncated")
        items.append(body[pos : pos + length])
        pos += length
        if len(items) > max_items:
            raise FrameDecodeError(f"more than {max_items} items in one frame")
    return items
