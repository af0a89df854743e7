"""A Yamux stream's receive window, enforced on what the peer sends (entry Y4 of the table in
``node.p2p.compat``).

py-libp2p 0.8.1 keeps the window's books (``YamuxStream.recv_window``: what the stream granted,
less what arrived) but does not enforce it: a DATA frame beyond it is appended to the stream's
buffer with a warning, and ``recv_window`` is clamped to 0. A peer that ignores flow control
makes us buffer without bound on any stream we read slowly or not at all (a handler busy
elsewhere, the outbound pubsub stream nobody reads): 8 MiB written past a 256 KiB window were
all held, and nothing but the connection's end frees them.

go-yamux treats it as a protocol error of the session: a DATA frame longer than the stream's
remaining receive window (``readData``: ``length > recvWindow``) is not read, a GO_AWAY with
the protocol-error code is sent, and the session ends. Here the same, before the frame's body
is read: ``Yamux._read_data_body`` (every DATA frame with a body, on a new stream, an ACK or an
open stream, goes through it) compares the frame's length with the stream's ``recv_window``
(a new stream's initial window when the frame opens it), one comparison per frame. A frame
for a stream no longer known (one we reset, the peer's frames still in flight) is read and
dropped as in 0.8.1: nothing is held, and its sender may have been granted more than 256 KiB.
The frame's header is what the connection read last: the module's ``read_exactly`` (the
header read; the bodies go through it too) notes it on the secured connection.

On an overrun the session ends as 0.8.1 ends it for a frame body that is too slow: the error
raised is a ``trio.TooSlowError``, the one exception each of 0.8.1's three DATA paths passes to
its reader loop's clean-up (``event_shutting_down``, ``_cleanup_on_error``, the connection
closed; every other exception is caught by the open-stream path and the loop goes on). Its
loop then logs "timed out reading DATA frame body": our warning just before says what it was.
The connection is marked (:func:`window_overrun`) so that the host counts it and charges the
peer when the connection closes.

Honest peers never trip it: ``recv_window`` grows (``_grow_to_delta``, ``_apply_autotune_epoch``
under entry Y1) before the WINDOW_UPDATE granting it is written, so a sender never holds more
credit than ``recv_window`` says; a frame that uses the last byte of it is accepted.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import weakref
from typing import Any

import libp2p.stream_muxer.yamux.yamux as _yamux_module
import trio

from node.p2p.compat.version import require

__all__ = ["WindowOverrun", "patch_yamux_window", "window_overrun"]

_logger = logging.getLogger("node.p2p")

_Yamux = _yamux_module.Yamux
_original_read_exactly = getattr(_yamux_module, "read_exactly", None)
_original_read_data_body = getattr(_Yamux, "_read_data_body", None)
#: A new stream's window (the Yamux spec's 256 KiB; what ``YamuxStream`` starts with).
_INITIAL_WINDOW: int = getattr(_yamux_module, "DEFAULT_WINDOW_SIZE", 256 * 1024)
_SYN: int = getattr(_yamux_module, "FLAG_SYN", 1)  # in the low byte of the 16-bit flags
_GO_AWAY = struct.pack(getattr(_yamux_module, "YAMUX_HEADER_FORMAT", "!BBHII"), 0,
                       getattr(_yamux_module, "TYPE_GO_AWAY", 3), 0, 0,
                       getattr(_yamux_module, "GO_AWAY_PROTOCOL_ERROR", 1))
#: How long the GO_AWAY may wait for the socket: a peer that reads nothing must not hold the
#: connection's reader (the connection is closed right after, sent or not).
GO_AWAY_WAIT_S = 1.0

#: The connections ended for an overrun: (stream id, frame length, window left).
_overruns: weakref.WeakKeyDictionary[Any, tuple[int, int, int]] = weakref.WeakKeyDictionary()


class WindowOverrun(trio.TooSlowError):
    """A peer sent more on a stream than the receive window it was granted (see the module)."""


def window_overrun(muxed_conn: Any) -> bool:
    """Whether this (ended) connection's peer overran a stream's receive window."""
    try:
        return muxed_conn in _overruns
    except TypeError:  # not weak-referenceable: not a Yamux connection
        return False


async def _read_noting_header(reader: Any, n: int, *args: Any, **kwargs: Any) -> bytes:
    """``read_exactly`` for the Yamux module: the bytes read are noted on the reader, so that
    the DATA frame whose body is read next knows its header (the last thing read)."""
    assert _original_read_exactly is not None
    data: bytes = await _original_read_exactly(reader, n, *args, **kwargs)
    reader.syncnode_yamux_last = data
    return data


async def _read_data_body(self: Any, length: int) -> bytes:
    """``Yamux._read_data_body``, refusing a frame longer than its stream's window."""
    header: bytes = self.secured_conn.syncnode_yamux_last
    stream_id = int.from_bytes(header[4:8], "big")
    stream = self.streams.get(stream_id)
    if stream is not None:
        window = stream.recv_window
    elif header[3] & _SYN:  # it opens the stream: the initial window
        window = _INITIAL_WINDOW
    else:  # a stream gone (we reset it; frames in flight): read and dropped, as in 0.8.1
        window = length
    if length > window:
        await _end_session(self, stream_id, length, window)
    assert _original_read_data_body is not None
    body: bytes = await _original_read_data_body(self, length)
    return body


async def _end_session(conn: Any, stream_id: int, length: int, window: int) -> None:
    _overruns[conn] = (stream_id, length, window)
    _logger.warning("yamux: peer %s sent a %d-byte frame on stream %d with %d bytes of "
                    "receive window left: protocol error, connection ended", conn.peer_id,
                    length, stream_id, window)
    with trio.move_on_after(GO_AWAY_WAIT_S), contextlib.suppress(Exception):
        await conn._write_frame(_GO_AWAY)
    raise WindowOverrun(f"stream {stream_id}: {length}-byte frame, {window} bytes of window")


def patch_yamux_window() -> None:
    require(_yamux_module, "read_exactly", "DEFAULT_WINDOW_SIZE", "YAMUX_HEADER_FORMAT",
            "TYPE_GO_AWAY", "GO_AWAY_PROTOCOL_ERROR", "FLAG_SYN")
    require(_Yamux, "_read_data_body", "_write_frame", "handle_incoming")
    setattr(_yamux_module, "read_exactly", _read_noting_header)  # noqa: B010
    setattr(_Yamux, "_read_data_body", _read_data_body)  # noqa: B010
