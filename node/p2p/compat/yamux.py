"""Two per-frame costs of py-libp2p 0.8.1's Yamux, removed (issue 31, docs/bench/cluster.md):

1. *A window update for every read.* ``YamuxStream._auto_tune_and_send_window_update`` runs
   after each read, and when less than half the window was consumed (its "partial slack"
   case, nearly always for gossip) gives the bytes back at once: one WINDOW_UPDATE frame,
   Noise encryption and socket send per read call, and the pubsub reader reads each RPC's
   varint length and its body separately (``PY_YAMUX_RELEASE_ON_READ=0`` does not help: that
   case comes first). go-yamux, which the method says it mirrors, sends an update only once
   the window is down by half or more (``sendWindowUpdate``: delta < max/2 -> nothing). The
   replacement does that, with 0.8.1's own ``_grow_to_delta`` and auto-tuning epoch: the
   sender still has at least half a window (128 KiB of the default 256 KiB) while we read,
   and a gossip node's frame writes fall by about half.
2. *Debug text built for every frame.* ``Yamux._write_frame`` unpacks each frame's header and
   formats a ``logger.debug`` f-string before the write, whether or not debug logging is on.
   The replacement writes the frame as the original does (under the connection's write lock,
   then a checkpoint) and keeps the original, with its log line, for when debug is on.
3. *One Noise message and one socket send per frame* (W1). Frames of other writers that
   queued while the lock was held (other streams, window updates) are sent by the holder with
   its own, as one write: one encryption and one send for the lot. Nothing waits for company
   (a lone frame goes at once) and each writer returns once its frame went to the socket.

Entries Y1, Y2, W1 of the table in ``node.p2p.compat``.
"""

from __future__ import annotations

import logging
from typing import Any

import libp2p.stream_muxer.yamux.yamux as _yamux_module
import trio
from libp2p.io.exceptions import ConnectionClosedError

from node.p2p.compat.version import require

__all__ = ["patch_yamux"]

_Yamux = _yamux_module.Yamux
_Stream = _yamux_module.YamuxStream
_original_write_frame = getattr(_Yamux, "_write_frame", None)
#: W1 on (the default); off only when a benchmark measures the other steps without it
#: (``apply``'s ``without``): each frame is then written alone, as 0.8.1 does.
_coalesce = True
_yamux_logger = getattr(_yamux_module, "logger", logging.getLogger("libp2p.stream_muxer.yamux"))


class _Outbox:
    """One connection's frames waiting for its write lock, and how far they were sent."""

    __slots__ = ("failed", "frames", "queued", "sent")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.queued = 0  # frames ever queued (the last one's number)
        self.sent = 0  # frames handed to the connection, by number (or failed)
        self.failed = 0  # frames up to this number were in a batch whose write raised


async def _write_frame(self: Any, data: bytes) -> None:
    """``Yamux._write_frame`` without the per-frame debug text (the original when debug is on),
    coalescing: the writer holding the lock sends every frame queued behind it as one write."""
    if _yamux_logger.isEnabledFor(logging.DEBUG) and _original_write_frame is not None:
        await _original_write_frame(self, data)
        return
    if not _coalesce:
        async with self._write_lock:
            await self.secured_conn.write(data)
        await trio.lowlevel.checkpoint()
        return
    box: _Outbox | None = getattr(self, "_syncnode_outbox", None)
    if box is None:
        box = _Outbox()
        setattr(self, "_syncnode_outbox", box)  # noqa: B010
    box.frames.append(data)
    box.queued += 1
    mine = box.queued
    try:
        await self._write_lock.acquire()
    except BaseException:
        # Cancelled while queued: unless a holder took it, the frame is not sent (as before).
        if box.sent < mine:
            _drop(box.frames, data)
        raise
    try:
        if box.sent < mine:
            batch = box.frames[0] if len(box.frames) == 1 else b"".join(box.frames)
            box.frames.clear()
            last = box.queued
            try:
                await self.secured_conn.write(batch)
            except BaseException:
                box.failed = last
                raise
            finally:
                box.sent = last
        elif box.failed >= mine:
            raise ConnectionClosedError(
                "an earlier write of this connection, carrying this frame, failed")
    finally:
        self._write_lock.release()
    await trio.lowlevel.checkpoint()


def _drop(frames: list[bytes], frame: bytes) -> None:
    for i, queued in enumerate(frames):
        if queued is frame:
            del frames[i]
            return


async def _window_update_at_half(self: Any, *, bytes_read: int = 0) -> None:
    """A WINDOW_UPDATE only once the free receive window (buffered bytes counted as used)
    is at least half the target below it: go-yamux's rule."""
    del bytes_read  # the window itself says what was consumed
    # Checked first without the lock (trio runs this synchronously, and no holder of the
    # lock awaits while the window is half-updated): most reads need no update, and the
    # lock costs a scheduler pass per read.
    buffered = len(self.conn.stream_buffers.get(self.stream_id, b""))
    if self.target_recv_window - (self.recv_window + buffered) < self.target_recv_window // 2:
        return
    total = 0
    async with self.window_lock:
        buffered = len(self.conn.stream_buffers.get(self.stream_id, b""))
        delta = self.target_recv_window - (self.recv_window + buffered)
        # Half the target, go-yamux's constant (0.8.1's ``_grow_threshold`` reads two
        # environment variables on every call: ~1% of a busy node's samples).
        if delta > 0 and delta >= self.target_recv_window // 2:
            total = self._grow_to_delta(buffered) + self._apply_autotune_epoch(buffered)
            self._pending_recv_release = 0
    if total > 0:
        await self.send_window_update(total, skip_lock=True)


def patch_yamux(*, coalesce: bool = True) -> None:
    global _coalesce
    _coalesce = coalesce
    require(_Stream, "_auto_tune_and_send_window_update", "_grow_to_delta",
            "_apply_autotune_epoch", "send_window_update")
    require(_Yamux, "_write_frame")
    require(_yamux_module, "logger")
    setattr(_Stream, "_auto_tune_and_send_window_update", _window_update_at_half)  # noqa: B010
    setattr(_Yamux, "_write_frame", _write_frame)  # noqa: B010
