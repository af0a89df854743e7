"""Length-prefixed frames over a libp2p stream, and the error types of the p2p layer.

Wire format of one frame: ``uvarint(len(payload)) || payload`` (unsigned LEB128, minimal
encoding, the same prefix libp2p itself uses for its own protocols). A frame longer than
``max_frame_bytes`` is refused as soon as its prefix is read, before any payload is buffered.

Everything a remote peer can get wrong in the byte stream (a bad prefix, an oversized frame, a
frame cut short by EOF) raises :class:`FrameError`, which is also a
``sync.errors.RemoteProtocolError`` naming the peer, so callers that only know the ``sync``
error types still count it against that peer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from types import TracebackType

import trio
from libp2p.abc import INetStream
from libp2p.io.exceptions import IOException
from libp2p.network.stream.exceptions import StreamEOF, StreamReset

from sync.errors import RemoteProtocolError
from sync.recon.eventid import varint

__all__ = [
    "DialError",
    "FrameError",
    "FramedStream",
    "P2PError",
    "P2PTimeoutError",
    "PeerRefusedError",
    "StreamClosedError",
    "StreamOpenError",
    "decode_uvarint_prefix",
    "encode_frame",
]

logger = logging.getLogger("node.p2p")

_MAX_VARINT_BYTES = 10  # a uvarint of a 64-bit length never needs more
_READ_CHUNK = 64 * 1024
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


class FrameError(P2PError, RemoteProtocolError):
    """The peer sent bytes that are not a valid frame (garbage, oversized, truncated)."""

    def __init__(self, reason: str, peer: str | None = None) -> None:
        RemoteProtocolError.__init__(self, reason, peer)


def encode_frame(payload: bytes) -> bytes:
    """``uvarint(len(payload)) || payload``."""
    return varint(len(payload)) + payload


def decode_uvarint_prefix(
    buf: bytes | bytearray, max_value: int, peer: str | None = None
) -> tuple[int, int] | None:
    """Parse a length prefix at the start of ``buf``.

    Returns ``(value, prefix_length)``, or ``None`` when ``buf`` holds only part of a prefix.
    Raises :class:`FrameError` for a non-minimal or overlong varint and for a value above
    ``max_value``, as early as the bytes seen so far allow.
    """
    value = 0
    for i, byte in enumerate(buf[:_MAX_VARINT_BYTES]):
        value |= (byte & 0x7F) << (7 * i)
        if value > max_value:
            raise FrameError(f"frame longer than the {max_value}-byte limit", peer)
        if not byte & 0x80:
            if byte == 0 and i > 0:
                raise FrameError("non-minimal length prefix", peer)
            return value, i + 1
    if len(buf) >= _MAX_VARINT_BYTES:
        raise FrameError("length prefix is not a valid uvarint", peer)
    return None


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
        self._buf = bytearray()
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
        self._check_usable()
        if self._eof:
            raise StreamClosedError(f"stream closed by {self.peer_id}")
        result: bytes | None = None
        with trio.move_on_after(_inf_if_none(self._read_timeout)):
            result = await self._read_frame()
        if result is None:
            # A read cancelled midway may have consumed bytes we never saw: the byte stream is
            # no longer aligned on frames, so the only safe outcome is to drop the stream.
            self._on_timeout()
            await self._break("read timeout")
            raise P2PTimeoutError(f"no frame from {self.peer_id} within {self._read_timeout}s")
        return result

    async def _read_frame(self) -> bytes:
        while True:
            try:
                parsed = decode_uvarint_prefix(self._buf, self._max_frame_bytes, self.peer_id)
            except FrameError as exc:
                await self._frame_error(exc)
                raise
            if parsed is not None:
                break
            await self._fill(len(self._buf) + 1, mid_frame=bool(self._buf))
        length, prefix_len = parsed
        await self._fill(prefix_len + length, mid_frame=True)
        payload = bytes(self._buf[prefix_len : prefix_len + length])
        del self._buf[: prefix_len + length]
        return payload

    async def _fill(self, needed: int, *, mid_frame: bool) -> None:
        while len(self._buf) < needed:
            try:
                chunk = await self._stream.read(max(needed - len(self._buf), _READ_CHUNK))
            except StreamEOF:
                chunk = b""
            except StreamReset as exc:
                await self._break("reset by peer")
                raise StreamClosedError(f"stream reset by {self.peer_id}") from exc
            except (IOException, OSError) as exc:
                await self._break(f"read failed: {exc!r}")
                raise StreamClosedError(f"stream from {self.peer_id} broke: {exc!r}") from exc
            if not chunk:
                if mid_frame or self._buf:
                    exc2 = FrameError("stream ended inside a frame", self.peer_id)
                    await self._frame_error(exc2)
                    raise exc2
                self._eof = True
                raise StreamClosedError(f"stream closed by {self.peer_id}")
            self._buf += chunk

    # -- teardown -------------------------------------------------------------------------

    async def close(self) -> None:
        """Half-close our side and release the stream; idempotent, never raises."""
        if self._closed:
            return
        self._closed = True
        with trio.move_on_after(_CLOSE_GRACE_S) as scope:
            scope.shield = True
            try:
                await self._stream.close()
            except Exception:  # a stream already reset or broken is what we wanted anyway
                logger.debug("close of stream to %s failed", self.peer_id, exc_info=True)

    async def reset(self) -> None:
        """Abort the stream in both directions; idempotent, never raises."""
        if self._closed:
            return
        self._closed = True
        with trio.move_on_after(_CLOSE_GRACE_S) as scope:
            scope.shield = True
            try:
                await self._stream.reset()
            except Exception:
                logger.debug("reset of stream to %s failed", self.peer_id, exc_info=True)

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

    async def _frame_error(self, exc: FrameError) -> None:
        self._on_frame_error()
        logger.warning("bad frame from %s on %s: %s", self.peer_id, self.protocol_id, exc.reason)
        await self._break(exc.reason)

    async def _break(self, why: str) -> None:
        self._broken = why
        self._buf.clear()
        await self.reset()


def _inf_if_none(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout
