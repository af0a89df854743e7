"""Noise transport reads from a buffer (entry N1 of the table in ``node.p2p.compat``).

py-libp2p 0.8.1 reads each Noise message with two exact reads on the raw connection: the
2-byte length (``read_exactly(conn, 2)``), then the body. Each is a ``TrioTCPStream.read``: a
lock acquisition, a ``recv`` syscall and a scheduler pass, so a stream of small messages (a
Yamux frame per Noise message, one per gossip RPC) costs two socket round trips per message
even when the kernel already holds the next hundred.

Here a transport reader (after the handshake: the handshake reader is untouched, so no byte of
the handshake can be taken by the transport's buffer) reads up to :data:`READ_CHUNK` bytes at
a time and cuts Noise messages out of them. The buffer holds at most one chunk beyond the
message being cut (each read asks for at most ``READ_CHUNK`` bytes, and only when the buffer
lacks a whole message), so a connection's memory stays bounded by about two Noise messages.
End of stream raises ``IncompleteReadError`` as ``read_exactly`` does (a clean close when no
byte of a message arrived): Yamux's reader treats both as it did before.

The whole tail of a connection (a peer's last frames, its FIN, its GO_AWAY) now often comes in
one socket read, so Yamux reaches the connection's end before the application reads those
frames: entry Y3 (``yamux_end``) keeps them readable, which 0.8.1 did not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from libp2p.io.exceptions import IncompleteReadError
from libp2p.security.noise import io as _noise_io

from node.p2p.compat.version import require

__all__ = ["READ_CHUNK", "RxBuffer", "next_message", "patch_noise_reads"]

#: Bytes asked of the socket per read (the largest Noise message is 2 + 65,535 bytes).
READ_CHUNK = 64 * 1024
_LEN = getattr(_noise_io, "SIZE_NOISE_MESSAGE_LEN", 2)
_Transport = _noise_io.NoiseTransportReadWriter


class RxBuffer:
    """The bytes read from one connection's socket and not yet cut into Noise messages."""

    __slots__ = ("data", "start")

    def __init__(self) -> None:
        self.data = bytearray()
        self.start = 0  # bytes before it are consumed (trimmed on the next socket read)


async def next_message(rx: RxBuffer, read: Callable[[int], Awaitable[bytes]]) -> bytes:
    """The next Noise message (its body, still encrypted) from ``rx``, reading the socket
    with ``read(max_bytes)`` (``b""`` at its end) only when ``rx`` holds no whole message."""
    data = rx.data
    while True:
        start = rx.start
        have = len(data) - start
        if have >= _LEN:
            size = (data[start] << 8) | data[start + 1]
            end = start + _LEN + size
            if len(data) >= end:
                rx.start = end
                return bytes(data[start + _LEN:end])
            wanted = end - len(data)
        else:
            wanted = _LEN - have
        if start:
            del data[:start]
            rx.start = 0
        chunk = await read(max(wanted, READ_CHUNK))
        if not chunk:
            have = len(data)
            raise IncompleteReadError(
                f"Connection closed during read operation: {have} bytes of a Noise message",
                expected_bytes=have + wanted, received_bytes=have)
        data += chunk


async def _read_msg(self: Any, prefix_encoded: bool = False) -> bytes:
    """``NoiseTransportReadWriter.read_msg`` from the connection's read buffer."""
    rx: RxBuffer | None = getattr(self, "_syncnode_rx", None)
    if rx is None:
        rx = RxBuffer()
        setattr(self, "_syncnode_rx", rx)  # noqa: B010
    message = await next_message(rx, self.read_writer.read_write_closer.read)
    if prefix_encoded:
        message = message[len(self.prefix):]
    return bytes(self.decrypt(message))


def patch_noise_reads() -> None:
    require(_noise_io, "SIZE_NOISE_MESSAGE_LEN", "NoisePacketReadWriter")
    require(_Transport, "read_msg", "decrypt", "prefix")
    setattr(_Transport, "read_msg", _read_msg)  # noqa: B010
