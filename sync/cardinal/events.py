"""Events a :class:`~sync.cardinal.consumer.Consumer` emits, and its counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sync.cardinal.payload import BlockPayload

__all__ = [
    "BlockApplied",
    "BlockFailed",
    "BlockRef",
    "BlockReverted",
    "ChainUpdated",
    "ConsumerEvent",
    "ConsumerStats",
    "ReorgFinished",
    "ReorgIgnored",
    "ReorgStarted",
]


@dataclass(frozen=True, slots=True)
class BlockRef:
    """A block's identity and fork-choice fields, without its content."""

    hash: bytes
    number: int
    weight: int


@dataclass(frozen=True, slots=True)
class BlockApplied:
    """``block`` joined the canonical chain (its parent is the previous head)."""

    block: BlockPayload


@dataclass(frozen=True, slots=True)
class BlockReverted:
    """The canonical head ``hash`` was taken off the chain (newest first).

    ``block`` is None only when a deep Reorg message reverts blocks older than the retained
    window, whose content the consumer no longer holds.
    """

    hash: bytes
    number: int
    block: BlockPayload | None


@dataclass(frozen=True, slots=True)
class ChainUpdated:
    """One head change, after its BlockReverted / BlockApplied events: the hashes ``added`` and
    ``removed``, each oldest first, grouped as the Go reference's ChainUpdate groups them."""

    added: tuple[bytes, ...]
    removed: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class BlockFailed:
    """Producers disagree about block ``hash``; see ``reason``.

    Before completion the block is dropped and every later message for it is ignored, so no
    inconsistent block is ever emitted. With ``after_completion`` the first version was already
    complete; it stays as it is and the conflicting message is ignored.
    """

    hash: bytes
    reason: str
    after_completion: bool = False


@dataclass(frozen=True, slots=True)
class ReorgStarted:
    """A Reorg message rolled the chain back to ``hash`` (number ``number``)."""

    hash: bytes
    number: int
    channel: str


@dataclass(frozen=True, slots=True)
class ReorgFinished:
    """The ReorgComplete message closed reorg channel ``channel``."""

    hash: bytes
    number: int
    channel: str


@dataclass(frozen=True, slots=True)
class ReorgIgnored:
    """A Reorg message could not be followed (unknown ancestor, or a reorg already running)."""

    hash: bytes
    number: int
    channel: str
    reason: str


ConsumerEvent = (
    BlockApplied
    | BlockReverted
    | ChainUpdated
    | BlockFailed
    | ReorgStarted
    | ReorgFinished
    | ReorgIgnored
)


@dataclass(slots=True)
class ConsumerStats:
    """Counters of a consumer's work; all start at zero and only grow."""

    messages: int = 0
    duplicates: int = 0
    queued_early: int = 0
    untracked: int = 0
    too_old: int = 0
    completed: int = 0
    failed: int = 0
    evicted_pending: int = 0
    evicted_blocks: int = 0
    evicted_early: int = 0
    ignored_closed_channel: int = 0
    excess_producers: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
