"""What a replica knows about one entity (one record of one table), as an immutable value.

The storage layer keeps the same facts in its state tables: the record's upsert and delete
versions and one LWW register per column. Updates to a record never upserted write registers
like any other (invisible until an upsert creates the row): that is the mempool of the spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sync.crdt.values import Value, value_text

__all__ = ["EMPTY", "Cell", "EntityState", "Version", "cell_wins"]


@dataclass(frozen=True, order=True)
class Version:
    """A (timestamp, sender) pair; the greater one is the later one."""

    timestamp: int
    sender: str


@dataclass(frozen=True)
class Cell:
    """The LWW register of one column: the winning write so far."""

    timestamp: int
    value: Value
    sender: str

    @property
    def order_key(self) -> tuple[int, str, str]:
        # value_text is injective, so distinct writes never tie and the order is total.
        return (self.timestamp, value_text(self.value), self.sender)


def cell_wins(new: Cell, old: Cell | None) -> bool:
    """True if ``new`` replaces ``old``: later timestamp, then greater value text, then sender."""
    if old is None:
        return True
    if new.timestamp != old.timestamp:
        # The common case; the value text is only worth computing for a tie.
        return new.timestamp > old.timestamp
    return new.order_key > old.order_key


@dataclass(frozen=True)
class EntityState:
    """Everything known about one (table, entity id).

    Invariants kept by the rules: every cell and ``upserted`` are newer than ``deleted``, so the
    record exists exactly when ``upserted`` is set.
    """

    upserted: Version | None = None
    deleted: Version | None = None
    cells: Mapping[str, Cell] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The rules hand over fresh read-only mappings; anything else gets a private copy.
        if not isinstance(self.cells, MappingProxyType):
            object.__setattr__(self, "cells", MappingProxyType(dict(self.cells)))

    @property
    def alive(self) -> bool:
        """The record exists: some upsert is newer than every delete (delete wins ties)."""
        if self.upserted is None:
            return False
        return self.deleted is None or self.upserted.timestamp > self.deleted.timestamp

    @property
    def is_empty(self) -> bool:
        return self == EMPTY

    def is_dominated(self, timestamp: int) -> bool:
        """A write at ``timestamp`` can never be visible: the tombstone is at least as new."""
        return self.deleted is not None and timestamp <= self.deleted.timestamp

    def values(self) -> dict[str, Value]:
        return {column: cell.value for column, cell in self.cells.items()}

    def row(
        self, columns: Mapping[str, object], epochs: Mapping[str, int] | None = None
    ) -> dict[str, Value] | None:
        """The visible row with every declared column (NULL where unwritten), or None.

        ``epochs``: column -> the Lamport time its current type took effect; a cell written
        at or before it (under an older type, or before the column was re-added) reads NULL.
        """
        if not self.alive:
            return None
        out: dict[str, Value] = {}
        for column in sorted(columns):
            cell = self.cells.get(column)
            epoch = -1 if epochs is None else epochs.get(column, -1)
            out[column] = cell.value if cell is not None and cell.timestamp > epoch else None
        return out


EMPTY = EntityState()
