"""Effects: the explicit, ordered list of state changes one message causes.

``plan`` (in ``sync.crdt.rules``) returns them and ``reduce_entity`` applies them; the memory
replica does nothing else, and the SQL implementation performs the same changes on its tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sync.crdt.message import CrdtMessage
from sync.crdt.schema import RejectReason
from sync.crdt.values import Value

__all__ = [
    "Compacted",
    "CreateRecord",
    "Effect",
    "NoteUpsert",
    "Reject",
    "SetCell",
    "Tombstone",
    "count_effects",
]


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
class Compacted:
    """The tombstone (and, for a dead record, its upsert version) older than the stability
    horizon is forgotten (``compact_entity``); ``removed``: nothing is left of the entity."""

    table: str
    entity_id: str
    deleted_at: int
    removed: bool


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
    | Compacted
    | Reject
)


def count_effects(effects: Iterable[Effect]) -> Counter[str]:
    """Metric counts of effects, keyed e.g. ``cells_set``, ``rejected_bad_type``,
    ``tombstones_compacted``."""
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
        elif isinstance(effect, Compacted):
            counts["tombstones_compacted"] += 1
        else:
            counts[f"rejected_{effect.reason.value}"] += 1
    return counts
