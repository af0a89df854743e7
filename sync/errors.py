"""Error types shared by every sans-IO protocol core.

Modelled on h11: a peer's bad bytes become ``RemoteProtocolError`` (never another exception
type), misuse of the API by our own code becomes ``LocalProtocolError``.
"""

from __future__ import annotations

__all__ = ["LocalProtocolError", "RemoteProtocolError", "SyncError"]


class SyncError(Exception):
    """Base class of every error raised by the ``sync`` package."""


class RemoteProtocolError(SyncError):
    """A peer (or a file) sent something that violates the protocol.

    ``peer`` names the offender when known (a peer id, a file name) so that the caller can count
    the error against it; ``reason`` is a short, stable, machine-friendly explanation.
    """

    def __init__(self, reason: str, peer: str | None = None) -> None:
        self.reason = reason
        self.peer = peer
        super().__init__(f"{reason} (from {peer})" if peer else reason)


class LocalProtocolError(SyncError):
    """Our own code used a protocol object in a way the protocol does not allow."""
