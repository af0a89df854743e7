"""Effects: the explicit, ordered list of state changes one message causes.

``plan`` (in ``sync.crdt.rules``) returns them and ``reduce_entity`` applies them; the memory
replica does nothing else, and the SQL implementation performs the same changes on its tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from sync.crdt.message import CrdtMessage
from sync.crdt.schema import RejectReason
from sync.crdt.values import Value

__all__ = [
    "CreateRecord",
    "DropFromMempool",
    "DropReason",
    "Effect",
    "HoldInMempool",
    "NoteUpsert",
    "Reject",
    "ReleaseFromMempool",
    "SetCell",
    "Tombstone",
    "count_effects",
]


class DropReason(StrEnum):
    DOMINATED = "dominated"  # a tombstone at least as new makes the update pointless
    EVICTED_CAP = "evicted_cap"  # the entity's mempool was full; the oldest update goes
    EVICTED_AGE = "evicted_age"  # held longer than max_age_ms
    EVICTED_LAG = "evicted_lag"  # max_lag Lamport ticks older than the newest message seen


@dataclass(frozen=True)
class SetCell:
    """A column register takes a new winning write. ``visible``: the row exists, so its
    column changes too; otherwise only the state table changes."""

    table: str
    entity_id: str
    column: str
    value: Value
    timestamp: int
    sender: str
    visible: bool


@dataclass(frozen=True)
class CreateRecord:
    """The record (re)appears: insert its row with ``values`` (cells already known from
    writes newer than the tombstone; other columns NULL). The upsert version becomes
    (timestamp, sender). The message's own columns follow as ``SetCell`` effects."""

    table: str
    entity_id: str
    timestamp: int
    sender: str
    values: Mapping[str, Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(sorted(self.values.items()))))


@dataclass(frozen=True)
class NoteUpsert:
    """The upsert version advances to (timestamp, sender) without creating a row: the record
    already exists, or the upsert is not newer than its tombstone."""

    table: str
    entity_id: str
    timestamp: int
    sender: str


@dataclass(frozen=True)
class Tombstone:
    """The delete version advances to (timestamp, sender). Registers of ``cleared`` columns
    (writes not newer than the delete) are removed; ``row_removed``: delete the row, else
    (the record survives through a newer upsert) set the cleared columns to NULL."""

    table: str
    entity_id: str
    timestamp: int
    sender: str
    row_removed: bool
    cleared: tuple[str, ...]


@dataclass(frozen=True)
class HoldInMempool:
    """Store an update whose record has never been upserted."""

    message: CrdtMessage
    held_at_ms: int


@dataclass(frozen=True)
class ReleaseFromMempool:
    """Remove a held update because its record appeared; its ``SetCell`` effects follow."""

    message: CrdtMessage


@dataclass(frozen=True)
class DropFromMempool:
    """Remove (or never hold) an update for ``reason``; evictions lose it on this replica."""

    message: CrdtMessage
    reason: DropReason


@dataclass(frozen=True)
class Reject:
    """The message breaks a schema; nothing changes. It stays in the event log."""

    message: CrdtMessage
    reason: RejectReason
    detail: str


Effect = (
    SetCell
    | CreateRecord
    | NoteUpsert
    | Tombstone
    | HoldInMempool
    | ReleaseFromMempool
    | DropFromMempool
    | Reject
)


def count_effects(effects: Iterable[Effect]) -> Counter[str]:
    """Metric counts of effects, keyed e.g. ``cells_set``, ``rejected_bad_type``,
    ``mempool_held``, ``mempool_released``, ``mempool_dropped_evicted_cap``."""
    counts: Counter[str] = Counter()
    for effect in effects:
        if isinstance(effect, SetCell):
            counts["cells_set"] += 1
        elif isinstance(effect, CreateRecord):
            counts["records_created"] += 1
        elif isinstance(effect, NoteUpsert):
            counts["upserts_noted"] += 1
        elif isinstance(effect, Tombstone):
            counts["tombstones"] += 1
            counts["records_deleted"] += effect.row_removed
        elif isinstance(effect, HoldInMempool):
            counts["mempool_held"] += 1
        elif isinstance(effect, ReleaseFromMempool):
            counts["mempool_released"] += 1
        elif isinstance(effect, DropFromMempool):
            counts[f"mempool_dropped_{effect.reason.value}"] += 1
        else:
            counts[f"rejected_{effect.reason.value}"] += 1
    return counts
