"""Events an :class:`~sync.sds.channel.SdsChannel` reports, as small frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Acknowledged",
    "Delivered",
    "DependencyLost",
    "EphemeralReceived",
    "Evicted",
    "MissingDependencies",
    "MissingEntry",
    "PossiblyAcknowledged",
    "RepairAnswered",
    "RepairRefused",
    "RepairRequested",
    "ResendExhausted",
    "SdsEvent",
]


@dataclass(frozen=True, init=False)
class Delivered:
    """A content message entered the local log (our own messages too, at send time).

    ``wire`` is the canonical signed message (no bloom filter, no repair request): store it,
    relay it, hand it to Recon. ``lost_dependency`` is true when the message was delivered
    although a dependency was declared irretrievably lost.
    """

    message_id: str
    sender_id: str
    lamport: int
    content: bytes
    causal_history: tuple[str, ...]
    wire: bytes = field(repr=False)
    lost_dependency: bool = False

    def __init__(self, message_id: str, sender_id: str, lamport: int, content: bytes,
                 causal_history: tuple[str, ...], wire: bytes,
                 lost_dependency: bool = False) -> None:
        # The generated frozen ``__init__`` sets each field through ``object.__setattr__``
        # (1.1 us here); one is built per delivery, so the fields go into the instance dict
        # at once (0.6 us). Still frozen: assignment raises as before.
        self.__dict__.update(message_id=message_id, sender_id=sender_id, lamport=lamport,
                             content=content, causal_history=causal_history, wire=wire,
                             lost_dependency=lost_dependency)


@dataclass(frozen=True)
class EphemeralReceived:
    """An ephemeral message: delivered at once, never logged, buffered or acknowledged."""

    message_id: str
    sender_id: str
    content: bytes


@dataclass(frozen=True)
class Acknowledged:
    """One of our messages left the outgoing buffer: a causal history named it
    (``by_bloom`` false) or enough independent bloom filters contained it (``by_bloom`` true)."""

    message_id: str
    by_bloom: bool = False


@dataclass(frozen=True)
class PossiblyAcknowledged:
    """A bloom filter from ``hits`` distinct participants contained one of our messages."""

    message_id: str
    hits: int


@dataclass(frozen=True)
class MissingEntry:
    message_id: str
    retrieval_hint: bytes | None
    sender_id: str | None


@dataclass(frozen=True)
class MissingDependencies:
    """Newly detected missing dependencies: fetch them by id (e.g. over Recon) and pass them
    to ``receive``; SDS-R will also ask the channel for them after T_req."""

    entries: tuple[MissingEntry, ...]


@dataclass(frozen=True)
class DependencyLost:
    """A dependency stayed missing for ``lost_timeout``: it is irretrievably lost, and the
    ``dependants`` waiting for it were delivered (policy "deliver") or dropped ("drop")."""

    message_id: str
    dependants: tuple[str, ...]


@dataclass(frozen=True)
class ResendExhausted:
    """We gave up resending one of our messages without it being acknowledged."""

    message_id: str
    attempts: int


@dataclass(frozen=True)
class RepairRequested:
    """SDS-R: we asked the channel to rebroadcast these ids."""

    message_ids: tuple[str, ...]


@dataclass(frozen=True)
class RepairAnswered:
    """SDS-R: we rebroadcast a message somebody asked for."""

    message_id: str


@dataclass(frozen=True)
class RepairRefused:
    """``requester`` asked us to rebroadcast more than its repair budget allows
    (``sync.sds.repair_budget``): the requests for ``message_ids`` were dropped. A requester
    costing more than it could justify: the node penalises it."""

    requester: str
    message_ids: tuple[str, ...]


@dataclass(frozen=True)
class Evicted:
    """A bounded buffer (``"waiting"``, ``"missing"``) dropped or refused an entry to stay
    within its limits (docs/security.md "SDS buffers"). A dropped waiting message is accepted
    afresh if it comes again (a resend, a repair, Recon)."""

    buffer: str
    message_id: str
    sender_id: str | None = None


SdsEvent = (
    Delivered
    | EphemeralReceived
    | Acknowledged
    | PossiblyAcknowledged
    | MissingDependencies
    | DependencyLost
    | ResendExhausted
    | RepairRequested
    | RepairAnswered
    | RepairRefused
    | Evicted
)

