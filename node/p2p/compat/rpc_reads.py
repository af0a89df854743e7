"""Pubsub's length-prefixed RPC reads from a buffer (entry B1 of the table in ``node.p2p.compat``).

py-libp2p 0.8.1's pubsub reader (``Pubsub.continuously_read_stream``) reads each RPC with
``read_varint_prefixed_bytes_limited``: the varint length one ``stream.read(1)`` per byte, then
the body. Each read goes through ``NetStream.read`` (its state lock), ``Yamux.read_stream``
(the connection's stream lock) and the window check: three lock acquisitions and scheduler
passes per call, three or four calls per RPC, although Yamux already holds the bytes.

The replacement (the module global the reader looks up at call time) reads the stream in
chunks of up to :data:`READ_CHUNK` bytes into a buffer kept per stream and cuts RPCs out of it,
with the same checks and errors: ``ParseError`` for a varint over 10 bytes,
``MessageTooLarge`` above the limit (before the body is read), ``IncompleteReadError`` when
the stream ends inside an RPC. A read asks the stream for more only when the buffer holds no
whole RPC, so the buffer stays below one RPC plus one chunk. The pubsub reader is the only
reader of its inbound stream, so no other reader can miss bytes held here.
"""

from __future__ import annotations

import weakref
from typing import Any

import libp2p.pubsub.pubsub as _pubsub_module
from libp2p.exceptions import ParseError
from libp2p.io.exceptions import IncompleteReadError, MessageTooLarge

from node.p2p.compat.version import require

__all__ = ["READ_CHUNK", "patch_rpc_reads", "read_rpc_bytes"]

#: Bytes asked of the stream per read.
READ_CHUNK = 64 * 1024
_MAX_VARINT_BYTES = 10


class _Buffer:
    __slots__ = ("data", "start")

    def __init__(self) -> None:
        self.data = bytearray()
        self.start = 0


_buffers: weakref.WeakKeyDictionary[Any, _Buffer] = weakref.WeakKeyDictionary()


def _prefix(data: bytearray, start: int) -> tuple[int, int] | None:
    """(payload length, prefix bytes) of the varint at ``start``, or None if incomplete."""
    value = shift = 0
    for i in range(start, min(len(data), start + _MAX_VARINT_BYTES)):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1 - start
        shift += 7
    if len(data) - start >= _MAX_VARINT_BYTES:
        raise ParseError("Varint decoding error: integer exceeds maximum size of 64 bits")
    return None


async def read_rpc_bytes(stream: Any, max_length: int) -> bytes:
    """The next varint-prefixed message of ``stream`` (at most ``max_length`` bytes)."""
    if max_length <= 0:
        raise ValueError("max_length must be greater than 0")
    buf = _buffers.get(stream)
    if buf is None:
        buf = _buffers[stream] = _Buffer()
    data = buf.data
    while True:
        start = buf.start
        wanted = 1
        prefix = _prefix(data, start)
        if prefix is not None:
            length, size = prefix
            if length > max_length:
                raise MessageTooLarge(
                    f"Message length {length} exceeds maximum allowed {max_length}")
            end = start + size + length
            if len(data) >= end:
                buf.start = end
                return bytes(data[start + size:end])
            wanted = end - len(data)
        if start:
            del data[:start]
            buf.start = 0
        chunk = await stream.read(max(wanted, READ_CHUNK))
        if not chunk:
            raise IncompleteReadError(
                f"Stream ended inside a message: {len(data)} bytes of it read",
                expected_bytes=len(data) + wanted, received_bytes=len(data))
        data += chunk


def patch_rpc_reads() -> None:
    require(_pubsub_module, "read_varint_prefixed_bytes_limited")
    require(_pubsub_module.Pubsub, "continuously_read_stream")
    setattr(_pubsub_module, "read_varint_prefixed_bytes_limited", read_rpc_bytes)  # noqa: B010
