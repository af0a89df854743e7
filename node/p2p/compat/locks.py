"""Locks on the per-message path that do not yield when free (entry K1 of the table in
``node.p2p.compat``).

A ``trio.Lock`` acquisition is a checkpoint: even when the lock is free the task goes back to
the scheduler (``cancel_shielded_checkpoint``) before it holds it. py-libp2p 0.8.1 takes five
such locks to write one message (``NetStream._state_lock``, Yamux's ``rw_lock`` and
``window_lock``, ``Yamux._write_lock``, ``TrioTCPStream.write_lock``) and four to read one,
nearly always free: each a scheduler pass, which is most of the per-message cost of a small
message (docs/bench/transport.md).

:class:`QuickLock` takes a free lock without yielding, and queues behind a held one exactly as
``trio.Lock`` does (FIFO, ownership checked on release). Only locks whose holder goes on to a
checkpoint of its own are replaced, so no loop loses its yields: the socket locks of
``TrioTCPStream`` (a ``send``/``recv`` follows), ``Yamux._write_lock`` (a socket write, and
``_write_frame`` ends with a checkpoint) and ``Yamux.streams_lock`` (taken by the connection's
reader, which reads the socket for each Noise message it has no bytes for, and by stream reads,
which wait on an event when they find no data), and ``YamuxStream.window_lock`` (held for a
few lines, never across an await; a writer taking it writes its frame next, and a reader
needing a window update sends one). ``NetStream._state_lock`` keeps yielding: it is the one
checkpoint of a stream read that finds its bytes already buffered, and a reader draining a
full receive window (up to 16 MiB) must still let other tasks run.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import libp2p.io.trio as _trio_io
import libp2p.stream_muxer.yamux.yamux as _yamux_module
import trio

from node.p2p.compat.version import require

__all__ = ["QuickLock", "patch_quick_locks"]


class QuickLock:
    """A ``trio.Lock`` whose acquisition does not yield when the lock is free."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = trio.Lock()

    async def acquire(self) -> None:
        try:
            self._lock.acquire_nowait()  # free and nobody queued: held without a yield
        except trio.WouldBlock:
            await self._lock.acquire()

    def acquire_nowait(self) -> None:
        self._lock.acquire_nowait()

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def statistics(self) -> Any:
        return self._lock.statistics()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.release()


def _with_quick_locks(cls: type, *names: str) -> None:
    original = cls.__init__  # type: ignore[misc]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        for name in names:
            setattr(self, name, QuickLock())

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(cls, "__init__", __init__)  # noqa: B010


def patch_quick_locks() -> None:
    require(_trio_io, "TrioTCPStream")
    require(_yamux_module, "Yamux", "YamuxStream")
    _with_quick_locks(_trio_io.TrioTCPStream, "read_lock", "write_lock")
    _with_quick_locks(_yamux_module.Yamux, "streams_lock", "_write_lock")
    _with_quick_locks(_yamux_module.YamuxStream, "window_lock")
