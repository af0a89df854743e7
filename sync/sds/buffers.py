"""Entries of the outgoing and incoming buffers (shared by the channel and its persistence)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sync.sds.bloom import BloomParams
from sync.sds.message import SignedEvent

__all__ = ["OutgoingEntry", "WaitingEntry"]


@dataclass
class OutgoingEntry:
    """One of our messages not acknowledged yet."""

    message_id: str
    wire: bytes
    attempts: int = 0
    possibly: bool = False
    bloom_senders: set[str] = field(default_factory=set)
    #: Probability that every bloom hit so far was a false positive.
    fp_product: float = 1.0
    #: Bit positions of the id per filter geometry seen, computed once.
    indices: dict[BloomParams, tuple[int, ...]] = field(default_factory=dict)
    #: The same positions as one integer (``sync.sds.bloom.index_mask``), per geometry: only
    #: while the buffer is small (``sync.sds.acks.MASKED_ENTRIES``).
    masks: dict[BloomParams, int] = field(default_factory=dict)
    #: The ids its causal history names (``sync.sds.outgoing``: acknowledged with it).
    history: tuple[str, ...] = ()
    #: When it was sent first (None: restored from saved state): acknowledgement delays, and
    #: whether a later message's acknowledgement may stand for it (``sync.sds.outgoing``).
    sent_at: float | None = None
    #: When it was last sent (first send or resend; None: restored): the base of its next
    #: resend when it becomes possibly acknowledged.
    last_sent: float | None = None


@dataclass
class WaitingEntry:
    """A received message whose dependencies are not all delivered."""

    event: SignedEvent
    missing: set[str]
    lost_dependency: bool = False
