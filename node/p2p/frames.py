"""Length-prefixed frames over a libp2p stream, and the error types of the p2p layer.

The frame format and its limits are ``sync.framing`` (sans-IO); this module only moves bytes
between a libp2p stream and a :class:`sync.framing.FrameDecoder`, with timeouts.

Everything a remote peer can get wrong in the byte stream (a bad prefix, an oversized frame, a
frame cut short by EOF) raises :class:`FrameError`, which is also a
``sync.errors.RemoteProtocolError`` naming the peer, so callers that only know the ``sync``
error types still count it against that peer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TypeVar

import trio
from libp2p.abc import INetStream
from libp2p.io.exceptions import IOException
from libp2p.network.stream.exceptions import StreamEOF, StreamReset

from sync import framing
from sync.errors import RemoteProtocolError
from sync.framing import encode_frame

__all__ = [
    "DialError",
    "FrameError",
    "FramedStream",
    "P2PError",
    "P2PTimeoutError",
    "PeerRefusedError",
    "StreamClosedError",
    "StreamOpenError",
    "encode_frame",
]

logger = logging.getLogger("node.p2p")

_READ_CHUNK = 64 * 1024
_T = TypeVar("_T")
_CLOSE_GRACE_S = 2.0


class P2PError(Exception):
    """Base class of every error raised by ``node.p2p``."""


class DialError(P2PError):
    """``connect`` failed: bad address, unreachable, handshake failure or timeout."""


class PeerRefusedError(DialError):
    """The peer is not in ``allowed_peers`` (or refused us because we are not in its list)."""


class StreamOpenError(P2PError):
    """``open_stream`` failed: not connected, protocol not supported, or timeout."""


class StreamClosedError(P2PError):
    """The stream ended: closed cleanly by the peer at a frame boundary, reset, or broken."""


class P2PTimeoutError(P2PError):
    """A read or write on a stream took longer than the configured timeout."""


class FrameError(P2PError, framing.FrameError):
    """The peer sent bytes that are not a valid frame (garbage, oversized, truncated)."""

    def __init__(self, reason: str, peer: str | None = None) -> None:
        RemoteProtocolError.__init__(self, reason, peer)


class FramedStream:
    """One libp2p stream carrying length-prefixed frames.

    Use as an async context manager (``async with``) so the stream is always released: a
    clean exit closes it, an exception resets it. After a :class:`FrameError` or a timeout the
    stream is reset and every further call raises :class:`StreamClosedError`.
    """

    def __init__(
        self,
        stream: INetStream,
        *,
        peer_id: str,
        protocol_id: str,
        max_frame_bytes: int,
        read_timeout: float | None,
        write_timeout: float | None,
        on_frame_error: Callable[[], None],
        on_timeout: Callable[[], None],
    ) -> None:
        self._stream = stream
        self.peer_id = peer_id
        self.protocol_id = protocol_id
        self._max_frame_bytes = max_frame_bytes
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._on_frame_error = on_frame_error
        self._on_timeout = on_timeout
        self._decoder = framing.FrameDecoder(max_frame_bytes, peer_id)
        self._closed = False
        self._broken: str | None = None
        self._eof = False  # the peer half-closed: no more frames, but we may still send

    # -- context manager / iteration ------------------------------------------------------

    async def __aenter__(self) -> FramedStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.reset()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._frames()

    async def _frames(self) -> AsyncIterator[bytes]:
        while True:
            try:
                yield await self.receive()
            except StreamClosedError:
                return

    # -- I/O ------------------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        """Send one frame; :class:`P2PError` if it is larger than ``max_frame_bytes``."""
        if len(data) > self._max_frame_bytes:
            raise P2PError(
                f"frame of {len(data)} bytes exceeds max_frame_bytes={self._max_frame_bytes}"
            )
        self._check_usable()
        frame = encode_frame(bytes(data))
        with trio.move_on_after(_inf_if_none(self._write_timeout)) as scope:
            try:
                await self._stream.write(frame)
            except (IOException, OSError) as exc:
                await self._break(f"write failed: {exc!r}")
                raise StreamClosedError(f"stream to {self.peer_id} broke: {exc!r}") from exc
        if scope.cancelled_caught:
            self._on_timeout()
            await self._break("write timeout")
            raise P2PTimeoutError(f"send to {self.peer_id} timed out after {self._write_timeout}s")

    async def receive(self) -> bytes:
        """The next frame's payload.

        :raises StreamClosedError: the peer closed the stream at a frame boundary, or reset it.
        :raises FrameError: garbage, oversized or truncated frame (counted; stream reset).
        :raises P2PTimeoutError: no complete frame within ``read_timeout`` (stream reset).
        """
        return await self._timed_read(self._read_frame)

    async def next_size(self) -> int:
        """The payload length of the next frame, from its prefix (the payload may still be on
        its way; the peer's flow-control window bounds what it sent): so that a peer can be
        charged for a frame, or refused, before the node reads all of it. Raises as
        :meth:`receive` does."""
        return await self._timed_read(self._read_size)

    async def _timed_read(self, read: Callable[[], Awaitable[_T]]) -> _T:
        self._check_usable()
        if self._eof:
            raise StreamClosedError(f"stream closed by {self.peer_id}")
        result: _T | None = None
        with trio.move_on_after(_inf_if_none(self._read_timeout)):
            result = await read()
        if result is None:
            # A read cancelled midway may have consumed bytes we never saw: the byte stream is
            # no longer aligned on frames, so the only safe outcome is to drop the stream.
            self._on_timeout()
            await self._break("read timeout")
            raise P2PTimeoutError(f"no frame from {self.peer_id} within {self._read_timeout}s")
        return result

    async def _read_size(self) -> int:
        while True:
            try:
                size = self._decoder.next_size()
            except framing.FrameError as exc:
                raise await self._frame_error(exc.reason) from None
            if size is not None:
                return size
            await self._fill(1)

    async def _read_frame(self) -> bytes:
        while True:
            try:
                frame = self._decoder.next_frame()
            except framing.FrameError as exc:
                raise await self._frame_error(exc.reason) from None
            if frame is not None:
                return frame
            await self._fill(self._decoder.wanted())

    async def _fill(self, wanted: int) -> None:
        try:
            chunk = await self._stream.read(max(wanted, _READ_CHUNK))
        except StreamEOF:
            chunk = b""
        except StreamReset as exc:
            await self._break("reset by peer")
            raise StreamClosedError(f"stream reset by {self.peer_id}") from exc
        except (IOException, OSError) as exc:
            await self._break(f"read failed: {exc!r}")
            raise StreamClosedError(f"stream from {self.peer_id} broke: {exc!r}") from exc
        if chunk:
            self._decoder.feed(chunk)
            return
        try:
            self._decoder.end_of_stream()
        except framing.FrameError as exc:
            raise await self._frame_error(exc.reason) from None
        self._eof = True
        raise StreamClosedError(f"stream closed by {self.peer_id}")

    # -- teardown -------------------------------------------------------------------------

    async def close(self) -> None:
        """Half-close our side and release the stream; idempotent, never raises."""
        await self._release(self._stream.close, "close")

    async def reset(self) -> None:
        """Abort the stream in both directions; idempotent, never raises."""
        await self._release(self._stream.reset, "reset")

    async def _release(self, how: Callable[[], Awaitable[None]], what: str) -> None:
        if self._closed:
            return
        self._closed = True
        with trio.move_on_after(_CLOSE_GRACE_S) as scope:
            scope.shield = True
            try:
                await how()
            except Exception:  # a stream already reset or broken is what we wanted anyway
                logger.debug("%s of stream to %s failed", what, self.peer_id, exc_info=True)

    @property
    def closed(self) -> bool:
        return self._closed or self._broken is not None

    async def close_write(self) -> None:
        """Half-close: tell the peer we send no more frames, keep receiving its replies."""
        self._check_usable()
        half_close = getattr(self._stream, "close_write", None)  # NetStream has it, the ABC not
        if half_close is None:
            raise P2PError("this stream type cannot half-close")
        try:
            await half_close()
        except (IOException, OSError) as exc:
            await self._break(f"close_write failed: {exc!r}")
            raise StreamClosedError(f"stream to {self.peer_id} broke: {exc!r}") from exc

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise StreamClosedError(f"stream to {self.peer_id} is unusable: {self._broken}")
        if self._closed:
            raise StreamClosedError(f"stream to {self.peer_id} was closed locally")

    async def _frame_error(self, reason: str) -> FrameError:
        """Count and log a bad frame, drop the stream; the error for the caller to raise."""
        self._on_frame_error()
        logger.warning("bad frame from %s on %s: %s", self.peer_id, self.protocol_id, reason)
        await self._break(reason)
        return FrameError(reason, self.peer_id)

    async def _break(self, why: str) -> None:
        self._broken = why
        await self.reset()


def _inf_if_none(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout
