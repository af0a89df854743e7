"""The typed actions the replication cores return: what a driver must do, nothing it decides.

A driver carries each out in order (``node.replication`` does it with libp2p, SQL and trio; the
simulator with its network model) and answers the requests (``ReadStored``) by calling the core
back. Every rule lives in the core that returned the action.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sync.errors import ErrorKind

__all__ = [
    "Action",
    "ClaimsLapsed",
    "KeysWithheld",
    "Penalize",
    "ReadStored",
    "ReconcileSoon",
    "Rejected",
    "Released",
    "Role",
    "SessionFailed",
    "StartSession",
]


class Role(StrEnum):
    """Which side of a Recon session we are (the value is the metric label)."""

    INITIATOR = "initiator"
    RESPONDER = "responder"


@dataclass(frozen=True, slots=True)
class StartSession:
    """Open a Recon session with ``peer`` (we initiate)."""

    peer: str


@dataclass(frozen=True, slots=True)
class Penalize:
    """Lower ``peer``'s standing by ``count`` times the weight of ``penalty``
    (``sync.peerscore.DEFAULT_WEIGHTS``)."""

    peer: str
    penalty: str
    count: float = 1.0


@dataclass(frozen=True, slots=True)
class Rejected:
    """An input from ``peer`` was refused (count it under ``kind.value``; ``reason``: for logs)."""

    peer: str | None
    kind: ErrorKind
    reason: str


@dataclass(frozen=True, slots=True)
class ReadStored:
    """Request: which of ``keys`` does the log already hold? Answer with
    ``ReconLifecycle.stored(ticket, held)`` before fetching."""

    ticket: int
    keys: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class Released:
    """Claimed keys went back to the pool: reconcile again soon (the core already poked its
    own scheduler; a driver only needs to wake up and look at ``get_timer``)."""


@dataclass(frozen=True, slots=True)
class ReconcileSoon:
    """Fetch by id could not close ``count`` gaps: they are left to Recon (poke it)."""

    count: int


@dataclass(frozen=True, slots=True)
class ClaimsLapsed:
    """``count`` keys claimed from ``peer`` were never delivered within the claim timeout."""

    peer: str
    count: int


@dataclass(frozen=True, slots=True)
class KeysWithheld:
    """``peer`` answered a want list without ``count`` keys it had advertised."""

    peer: str
    count: int


@dataclass(frozen=True, slots=True)
class SessionFailed:
    """A session ended early; ``kind``: the protocol fault if the peer broke the protocol
    (None: a timeout, a transport error, our own overload)."""

    peer: str
    role: Role
    kind: ErrorKind | None
    backoff_s: float


Action = (StartSession | Penalize | Rejected | ReadStored | Released | ReconcileSoon
          | ClaimsLapsed | KeysWithheld | SessionFailed)
