"""The envelope that carries one Cardinal message as the content of one event.

``00 uvarint(len key) key value`` for a message routed by its key's prefix, or
``01 uvarint(len name) name uvarint(len key) key value`` for a message of the in-order reorg
channel ``name``. Decoding a peer's content raises only ``RemoteProtocolError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.cardinal.codec import DEFAULT_LIMITS
from sync.errors import RemoteProtocolError
from sync.varint import read_uvarint, uvarint

__all__ = [
    "ENVELOPE_MESSAGE",
    "ENVELOPE_REORG",
    "MAX_REORG_CHANNEL",
    "Envelope",
    "decode_envelope",
    "encode_envelope",
]

ENVELOPE_MESSAGE = 0x00
ENVELOPE_REORG = 0x01
MAX_REORG_CHANNEL = 256


@dataclass(frozen=True, slots=True)
class Envelope:
    """One Cardinal message as carried by an event; ``reorg_channel`` scopes deep reorgs."""

    key: bytes
    value: bytes
    reorg_channel: str | None = None


def encode_envelope(key: bytes, value: bytes, reorg_channel: str | None = None) -> bytes:
    """``00 uvarint(len key) key value``, or ``01 uvarint(len name) name uvarint(len key) key
    value`` for a message of the in-order reorg channel ``name``."""
    head = bytes([ENVELOPE_MESSAGE])
    if reorg_channel is not None:
        name = reorg_channel.encode("utf-8")
        if not 0 < len(name) <= MAX_REORG_CHANNEL:
            raise ValueError("reorg channel name must be 1..256 bytes")
        head = bytes([ENVELOPE_REORG]) + uvarint(len(name)) + name
    return head + uvarint(len(key)) + key + value


def decode_envelope(content: bytes, max_key: int = DEFAULT_LIMITS.max_key) -> Envelope:
    """Raises only RemoteProtocolError."""
    if not content:
        raise RemoteProtocolError("blocks envelope: empty")
    kind, pos = content[0], 1
    channel = None
    if kind == ENVELOPE_REORG:
        size, pos = read_uvarint(content, pos)
        if not 0 < size <= MAX_REORG_CHANNEL or pos + size > len(content):
            raise RemoteProtocolError("blocks envelope: bad reorg channel length")
        try:
            channel = content[pos : pos + size].decode("utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError("blocks envelope: reorg channel is not UTF-8") from None
        pos += size
    elif kind != ENVELOPE_MESSAGE:
        raise RemoteProtocolError(f"blocks envelope: unknown kind {kind}")
    size, pos = read_uvarint(content, pos)
    if size > max_key or pos + size > len(content):
        raise RemoteProtocolError("blocks envelope: bad key length")
    return Envelope(content[pos : pos + size], content[pos + size :], channel)
