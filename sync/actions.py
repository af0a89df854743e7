"""The typed actions of replication: what a driver must do, nothing it decides. One vocabulary
for every part of the core: the node's (``ReplicationCore``: sessions, gaps), its SDS channels
(``sync.replication.ChannelSet``: what to store, broadcast, count; the reads of a channel's log)
and a session's stream (``sync.transfer.ReconExchange``: frames, charges, key-store reads).

A driver carries each out in order (``node.replication`` does it with libp2p, SQL and trio; the
simulator with its network model) and answers the requests (``ReadStored``, ``ReadKeys``,
``ReadLog``, ``FetchDue``) by feeding the answer back as the core's next input. Every rule lives
in the core that returned the action.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sync.errors import ErrorKind
from sync.recon.reads import ReadKeys
from sync.sds import Delivered, MissingEntry, ReadDelivered, SdsEvent
from sync.stored_event import EventRecord

__all__ = [
    "Abort",
    "Action",
    "Broadcast",
    "ChannelNote",
    "Charge",
    "ClaimsLapsed",
    "Declined",
    "FetchDue",
    "GapFound",
    "KeysDropped",
    "KeysWithheld",
    "Penalize",
    "ReadLog",
    "ReadStored",
    "ReconcileSoon",
    "Reconciled",
    "Rejected",
    "Released",
    "Role",
    "SendFrame",
    "SessionFailed",
    "StartSession",
    "StepDropped",
    "StoreDelivered",
    "StoreFetched",
    "UnsignedAccepted",
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


@dataclass(frozen=True, slots=True)
class FetchDue:
    """Request: a fetch by id is due for ``batch``. Answer which of its ids SDS still misses
    (``ReplicationCore.plan_fetch``), fetch what the plan names, then ``fetched(plan)``."""

    batch: list[MissingEntry]


# -- a session's stream (``sync.transfer.ReconExchange``) -------------------------------------

@dataclass(frozen=True, slots=True)
class SendFrame:
    """Write this frame to the session's stream."""

    frame: bytes


@dataclass(frozen=True, slots=True)
class Declined:
    """The peer answered BUSY: the session ends, nobody is at fault."""


@dataclass(frozen=True, slots=True)
class KeysDropped:
    """Missing keys beyond the bound, left for a later session."""

    count: int


@dataclass(frozen=True, slots=True)
class Charge:
    """Charge the peer ``units`` of work for the message just decoded (``charging``
    exchanges only), then call ``ReplicationCore.charged``: it is answered only then."""

    units: int


@dataclass(frozen=True, slots=True)
class Abort:
    """The reconciliation ran past its deadline: end the session (the peer is backed off)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Reconciled:
    """The reconciliation is over (it comes after the frames of its last step): ``missing``
    keys were found to fetch, ``dropped`` more beyond the bound (``truncated``). The driver
    tells the core (``ReplicationCore.reconciled``) and runs the transfer phases."""

    missing: int
    dropped: int
    truncated: bool


# -- the SDS channels (``sync.replication.channels.ChannelSet``) ------------------------------

@dataclass(frozen=True, slots=True)
class ReadLog:
    """Request: which of ``read.ids`` are in ``channel``'s log (committed or queued)? A step of
    the channel waits for the answer: feed it to ``ReplicationCore.delivered_read``."""

    channel: str
    read: ReadDelivered


@dataclass(frozen=True, slots=True)
class StoreDelivered:
    """``channel`` delivered ``delivered`` (stored as ``records``, in log order); the channel's
    state changed. ``prompt``: a fetched batch's, committed as soon as the store is free
    (a relayed batch otherwise gathers for ``storage.relayed_batch_delay_ms``)."""

    channel: str
    records: tuple[EventRecord, ...]
    delivered: tuple[Delivered, ...]
    prompt: bool = False


@dataclass(frozen=True, slots=True)
class StoreFetched:
    """Fetched events SDS took on its bulk path (and own echoes it no longer held): store
    ``records``; ``bulk``: channel -> how many were delivered so."""

    records: tuple[EventRecord, ...]
    bulk: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Publish ``datagram`` (a resend, a sync message, a repair answer) on ``channel``'s
    topic."""

    channel: str
    datagram: bytes


@dataclass(frozen=True, slots=True)
class GapFound:
    """``channel`` lacks these events' dependencies: tell the core which peers are connected
    (``ReplicationCore.missing``: fetch by id after the grace, prompt a session)."""

    channel: str
    entries: tuple[MissingEntry, ...]


@dataclass(frozen=True, slots=True)
class ChannelNote:
    """``channel`` reported ``event`` (an acknowledgement, an eviction, a repair asked or
    answered...): count it; nothing else follows from it."""

    channel: str
    event: SdsEvent


@dataclass(frozen=True, slots=True)
class UnsignedAccepted:
    """A waku channel took ``count`` messages nobody signed (docs/interop.md: the trust
    trade-off): count them."""

    channel: str
    count: int


@dataclass(frozen=True, slots=True)
class StepDropped:
    """A received message's step kept asking the store new questions and was given up (a
    resend, a repair or Recon brings the message again)."""

    channel: str


#: ``ReadKeys`` (``sync.recon``): a session's step waits for its key-store reads; feed them to
#: ``ReplicationCore.keys_read``.
Action = (StartSession | Penalize | Rejected | ReadStored | Released | ReconcileSoon
          | ClaimsLapsed | KeysWithheld | SessionFailed | FetchDue
          | SendFrame | Declined | KeysDropped | Charge | Abort | Reconciled | ReadKeys
          | ReadLog | StoreDelivered | StoreFetched | Broadcast | GapFound | ChannelNote
          | UnsignedAccepted | StepDropped)
