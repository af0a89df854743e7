"""Length-prefixed frames, sans-IO: ``uvarint(len(payload)) || payload``.

The same prefix libp2p uses for its own protocols. :class:`FrameDecoder` is fed the bytes a
stream delivers and hands out whole frames; the driver in ``node.p2p.frames`` only reads and
writes the stream. A frame longer than ``max_frame_bytes`` is refused as soon as its prefix is
read, before any of its payload is buffered, so a peer cannot make us hold more than one
frame's worth of bytes.
"""

from __future__ import annotations

from typing import NoReturn

from sync.errors import RemoteProtocolError
from sync.varint import uvarint, uvarint_prefix

__all__ = ["FrameDecoder", "FrameError", "encode_frame"]


class FrameError(RemoteProtocolError):
    """The peer sent bytes that are not a valid frame (garbage, oversized, truncated)."""


def encode_frame(payload: bytes) -> bytes:
    """``uvarint(len(payload)) || payload``."""
    return uvarint(len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into frames of at most ``max_frame_bytes``.

    ``feed`` what arrives, then call ``next_frame`` until it returns ``None``; ``wanted``
    says how many bytes complete the frame being read (a hint for the read size). At the end
    of the stream ``end_of_stream`` tells a clean close at a frame boundary from a frame cut
    short. After a :class:`FrameError` the stream is out of step and the decoder is dead.
    """

    def __init__(self, max_frame_bytes: int, peer: str | None = None) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.peer = peer
        self._buf = bytearray()
        self._broken: str | None = None

    def feed(self, data: bytes) -> None:
        if self._broken is not None:
            raise FrameError(f"decoder unusable: {self._broken}", self.peer)
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def wanted(self) -> int:
        """Bytes still missing for the next frame (1 while its prefix is incomplete)."""
        parsed = self._prefix()
        if parsed is None:
            return 1
        length, prefix_len = parsed
        return max(prefix_len + length - len(self._buf), 0)

    def next_size(self) -> int | None:
        """The payload length of the next frame once its prefix is in (its payload may not
        be), else ``None``: a receiver can charge for a frame before reading all of it.

        :raises FrameError: a bad or oversized length prefix.
        """
        parsed = self._prefix()
        return None if parsed is None else parsed[0]

    def next_frame(self) -> bytes | None:
        """The next whole frame's payload, or ``None`` until more bytes are fed.

        :raises FrameError: a bad or oversized length prefix.
        """
        parsed = self._prefix()
        if parsed is None:
            return None
        length, prefix_len = parsed
        end = prefix_len + length
        if len(self._buf) < end:
            return None
        payload = bytes(self._buf[prefix_len:end])
        del self._buf[:end]
        return payload

    def end_of_stream(self) -> None:
        """The peer closed the stream: fine at a frame boundary, else :class:`FrameError`."""
        if self._buf:
            self._fail("stream ended inside a frame")

    def _prefix(self) -> tuple[int, int] | None:
        if self._broken is not None:
            raise FrameError(f"decoder unusable: {self._broken}", self.peer)
        try:
            return uvarint_prefix(self._buf, self.max_frame_bytes)
        except RemoteProtocolError as exc:
            self._fail(exc.reason)

    def _fail(self, reason: str) -> NoReturn:
        self._broken = reason
        self._buf.clear()
        raise FrameError(reason, self.peer)
