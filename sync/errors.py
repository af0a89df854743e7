"""Error types shared by every sans-IO protocol core.

Modelled on h11: a peer's bad bytes become ``RemoteProtocolError`` (never another exception
type), misuse of the API by our own code becomes ``LocalProtocolError``.

Every ``RemoteProtocolError`` carries an :class:`ErrorKind`. What a rejection costs the peer
(``sync.peerscore.penalty_of``) and the metric label it is counted under (``kind.value``) follow
from the kind by table lookup; ``reason`` is the human text (logs, API answers) and is never
parsed.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorKind", "LocalProtocolError", "RemoteProtocolError", "SyncError"]


class SyncError(Exception):
    """Base class of every error raised by the ``sync`` package."""


class ErrorKind(StrEnum):
    """What class of fault a peer (or a file) committed. The value is the metric label
    (``events_rejected_total{reason=...}``, ``recon_protocol_errors_total{reason=...}``), so
    labels form a small fixed set whatever a peer sends."""

    #: A frame or file that breaks its format or the protocol's order (the default).
    MALFORMED = "malformed"
    #: Asked for or sent more than a documented bound allows (key lists, rounds, bytes).
    OVER_LIMIT = "over a limit"
    #: Sent events nobody asked for.
    UNREQUESTED = "unrequested event"
    #: A gossip batch that cannot be unpacked.
    BAD_BATCH = "bad gossip batch"
    #: Bytes that do not decode as an SDS message.
    UNDECODABLE = "undecodable message"
    #: Decodes, but a field breaks SDS's limits (ids, history entries, no content nor clock).
    MALFORMED_EVENT = "malformed message"
    BAD_SIGNATURE = "bad signature"
    UNSIGNED = "message is not signed"
    BAD_ID = "message id does not match"
    TOO_LARGE = "message too large"
    #: A batch of fetched events some of which failed verification (``count`` of them).
    INVALID_EVENTS = "invalid events"
    #: Over the gossip budget of the neighbour that handed it to us.
    OVER_BUDGET = "over gossip budget"
    NOT_MEMBER = "sender not in allowed_peers"
    NOT_WRITER = "sender not a writer of this channel"
    LAMPORT_RANGE = "lamport out of range"
    LAMPORT_AHEAD = "lamport too far ahead"
    UNKNOWN_CHANNEL = "channel we do not replicate"
    #: Valid, but refused by a local rule (another channel's message, an ephemeral message).
    REFUSED = "refused"


class RemoteProtocolError(SyncError):
    """A peer (or a file) sent something that violates the protocol.

    ``peer`` names the offender when known (a peer id, a file name) so that the caller can count
    the error against it; ``reason`` is a short human explanation; ``kind`` classifies it (the
    penalty and the metric label follow from it); ``count``: how many offences it stands for
    (a batch with several invalid events).
    """

    def __init__(self, reason: str, peer: str | None = None,
                 kind: ErrorKind = ErrorKind.MALFORMED, count: int = 1) -> None:
        self.reason = reason
        self.peer = peer
        self.kind = kind
        self.count = count
        super().__init__(f"{reason} (from {peer})" if peer else reason)

    def __reduce__(self) -> tuple[object, ...]:
        # Crosses process boundaries (ingest workers, snapshot loaders) with its kind.
        return (type(self), (self.reason, self.peer, self.kind, self.count))

    def from_peer(self, peer: str | None, prefix: str = "") -> RemoteProtocolError:
        """The same fault, attributed to ``peer`` (``prefix``: context for the reason)."""
        return RemoteProtocolError(prefix + self.reason, peer, self.kind, self.count)


class LocalProtocolError(SyncError):
    """Our own code used a protocol object in a way the protocol does not allow."""
