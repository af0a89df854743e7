"""Frames of ``/syncnode/recon/1.0.0``: defined in :mod:`sync.transfer.frames` (sans-IO)."""

from __future__ import annotations

from sync.transfer import frames as _frames
from sync.transfer.frames import *  # noqa: F403

__all__ = _frames.__all__
