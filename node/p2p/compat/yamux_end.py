"""A Yamux stream's received bytes stay readable after its connection ends (entry Y3 of the
table in ``node.p2p.compat``).

py-libp2p 0.8.1 drops them. When the connection ends (the peer's GO_AWAY or clean close, a
broken socket: ``Yamux.handle_incoming`` runs ``_cleanup_on_error``; or our own
``Yamux.close``) it clears ``stream_buffers`` and marks every stream reset, ``read_stream``
raises once ``event_shutting_down`` is set before it looks at the buffer, and the connection's
``SwarmConn._cleanup`` then resets every ``NetStream`` of it. A peer that writes its last frame,
closes its stream and then its connection loses that frame whenever our reader reaches the end
of the connection before the application reads the stream: the application sees a reset
instead of the frame and EOF.

go-yamux keeps them: at the session's end a stream the peer had closed (FIN received,
``halfClosed``) still serves its receive buffer, then ``io.EOF``; any other stream is reset.
Here the same: just before the connection's streams are cleared, the receive buffer of each
stream whose peer had closed it (``recv_closed`` without a reset) is kept for that stream
alone (even when empty: the stream then answers EOF, not a reset). Its reads serve that buffer,
then raise ``MuxedStreamEOF``, as they did just before the end; every other stream ends as in
0.8.1. The connection's clean-up takes such a stream off the connection (``NetStream.remove``:
its resources are released and the notifees told, as a reset does) without resetting it.

Memory: what is kept is what the connection already held for streams the application had not
read, and no byte arrives after the end. A stream's buffer is what its peer sent within the
receive window the stream granted (0.8.1 appends a frame beyond the window with a warning, as
during the connection). The kept bytes live in a weak map keyed by the stream object: they go
when the application reads them to EOF or resets the stream, and otherwise with the stream
object itself, once the application drops it. A stream the application never accepted (its
handler never started) is referenced by nothing once the connection's bookkeeping is cleared,
so its bytes go with it.
"""

from __future__ import annotations

import weakref
from typing import Any

import libp2p.network.connection.swarm_connection as _swarm_conn_module
import libp2p.network.stream.net_stream as _net_stream_module
import libp2p.stream_muxer.yamux.yamux as _yamux_module
from libp2p.stream_muxer.exceptions import MuxedStreamEOF, MuxedStreamReset

from node.p2p.compat.version import require

__all__ = ["kept_streams", "patch_yamux_end"]

_Yamux = _yamux_module.Yamux
_Stream = _yamux_module.YamuxStream
_SwarmConn = _swarm_conn_module.SwarmConn
_NetStream = _net_stream_module.NetStream

_original_cleanup_on_error = getattr(_Yamux, "_cleanup_on_error", None)
_original_close = getattr(_Yamux, "close", None)
_original_read = getattr(_Stream, "read", None)
_original_reset = getattr(_NetStream, "reset", None)
_original_swarm_cleanup = getattr(_SwarmConn, "_cleanup", None)

#: The received bytes of the streams of ended connections, each kept for its stream alone.
_kept: weakref.WeakKeyDictionary[Any, bytearray] = weakref.WeakKeyDictionary()


def kept_streams() -> int:
    """How many streams of ended connections still keep received bytes to read."""
    return sum(1 for tail in list(_kept.values()) if tail)


def _keep_received(conn: Any) -> None:
    """Keep the buffer of each stream its peer had closed (FIN, no reset), before the
    connection clears its bookkeeping (its callers may have set ``event_shutting_down``
    already). Synchronous: no frame arrives and no read takes bytes while it runs; once the
    streams are cleared a second call finds none."""
    buffers = conn.stream_buffers
    for stream_id, stream in conn.streams.items():
        if stream.recv_closed and not stream.reset_received and stream not in _kept:
            buffer = buffers.get(stream_id)
            # The buffer object itself: a read in progress takes its bytes from the same one.
            _kept[stream] = buffer if buffer is not None else bytearray()


async def _cleanup_on_error(self: Any) -> None:
    """``Yamux._cleanup_on_error`` (the peer ended the connection, or its socket broke),
    keeping the received bytes of the streams the peer had closed."""
    _keep_received(self)
    assert _original_cleanup_on_error is not None
    await _original_cleanup_on_error(self)


async def _close(self: Any, *args: Any, **kwargs: Any) -> None:
    """``Yamux.close`` (we end the connection), keeping them the same way."""
    _keep_received(self)
    assert _original_close is not None
    await _original_close(self, *args, **kwargs)


def _take(tail: bytearray, n: int | None) -> bytes:
    if n is None or n < 0 or n >= len(tail):
        data = bytes(tail)
        tail.clear()
    else:
        data = bytes(tail[:n])
        del tail[:n]
    return data


def _from_kept(stream: Any, n: int | None) -> bytes:
    """The next bytes of a stream's kept buffer; ``MuxedStreamEOF`` once it is drained."""
    tail = _kept[stream]
    if n == 0:
        return b""
    if not tail:
        raise MuxedStreamEOF("Stream is closed for receiving")
    return _take(tail, n)


async def _read(self: Any, n: int | None = -1) -> bytes:
    """``YamuxStream.read``; after the connection's end, the kept bytes then EOF. A read
    already waiting when the connection ends is woken by the end and answered the same way.
    Nothing is kept before ``event_shutting_down`` is set: a live connection's reads look up
    no map."""
    ended = self.conn.event_shutting_down
    if ended.is_set() and self in _kept:
        return _from_kept(self, n)
    assert _original_read is not None
    try:
        data: bytes = await _original_read(self, n)
    except (MuxedStreamEOF, MuxedStreamReset):
        if ended.is_set() and self in _kept:
            return _from_kept(self, n)
        raise
    if not data and n != 0 and ended.is_set() and self in _kept:
        return _from_kept(self, n)
    return data


async def _reset(self: Any) -> None:
    """``NetStream.reset``: the application resetting a stream gives up its kept bytes."""
    if isinstance(self.muxed_stream, _Stream):
        _kept.pop(self.muxed_stream, None)
    assert _original_reset is not None
    await _original_reset(self)


async def _swarm_cleanup(self: Any) -> None:
    """``SwarmConn._cleanup`` (it resets every stream of the ended connection), taking off
    the connection first, without a reset, each stream that keeps bytes to read."""
    for net_stream in self.get_streams():
        if isinstance(net_stream.muxed_stream, _Stream) and net_stream.muxed_stream in _kept:
            await net_stream.remove()
    assert _original_swarm_cleanup is not None
    await _original_swarm_cleanup(self)


def patch_yamux_end() -> None:
    require(_Yamux, "_cleanup_on_error", "close", "read_stream")
    require(_Stream, "read")
    require(_NetStream, "reset", "remove")
    require(_SwarmConn, "_cleanup", "get_streams")
    setattr(_Yamux, "_cleanup_on_error", _cleanup_on_error)  # noqa: B010
    setattr(_Yamux, "close", _close)  # noqa: B010
    setattr(_Stream, "read", _read)  # noqa: B010
    setattr(_NetStream, "reset", _reset)  # noqa: B010
    setattr(_SwarmConn, "_cleanup", _swarm_cleanup)  # noqa: B010
