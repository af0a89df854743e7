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

Entries Y1, Y2 of the table in ``node.p2p.compat``.
"""

from __future__ import annotations

import logging
from typing import Any

import libp2p.stream_muxer.yamux.yamux as _yamux_module
import trio

from node.p2p.compat.version import require

__all__ = ["patch_yamux"]

_Yamux = _yamux_module.Yamux
_Stream = _yamux_module.YamuxStream
_original_write_frame = getattr(_Yamux, "_write_frame", None)
_yamux_logger = getattr(_yamux_module, "logger", logging.getLogger("libp2p.stream_muxer.yamux"))


async def _write_frame(self: Any, data: bytes) -> None:
    """``Yamux._write_frame`` without the per-frame debug text (the original when debug is on)."""
    if _yamux_logger.isEnabledFor(logging.DEBUG) and _original_write_frame is not None:
        await _original_write_frame(self, data)
        return
    async with self._write_lock:
        await self.secured_conn.write(data)
    await trio.lowlevel.checkpoint()


async def _window_update_at_half(self: Any, *, bytes_read: int = 0) -> None:
    """A WINDOW_UPDATE only once the free receive window (buffered bytes counted as used)
    is at least half the target below it: go-yamux's rule."""
    del bytes_read  # the window itself says what was consumed
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


def patch_yamux() -> None:
    require(_Stream, "_auto_tune_and_send_window_update", "_grow_to_delta",
            "_apply_autotune_epoch", "send_window_update")
    require(_Yamux, "_write_frame")
    require(_yamux_module, "logger")
    setattr(_Stream, "_auto_tune_and_send_window_update", _window_update_at_half)  # noqa: B010
    setattr(_Yamux, "_write_frame", _write_frame)  # noqa: B010
