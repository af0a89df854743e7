"""Frames of ``/syncnode/recon/1.0.0``: defined in :mod:`sync.transfer.frames` (sans-IO)."""

from __future__ import annotations

from sync.transfer.frames import (
    BUSY,
    EVENTS,
    EVENTS_LAST,
    RECON,
    WANT,
    WANT_LAST,
    FrameDecodeError,
    pack_items,
    pack_list,
    unpack_items,
)

__all__ = [
    "BUSY",
    "EVENTS",
    "EVENTS_LAST",
    "RECON",
    "WANT",
    "WANT_LAST",
    "FrameDecodeError",
    "pack_items",
    "pack_list",
    "unpack_items",
]
