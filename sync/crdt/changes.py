"""Row changes: what a subscriber of a replicated table sees when a batch of writes applies.

A change is judged on the *visible* rows (``EntityState.row``), not on the writes: several writes
to one record in a batch make one change, a write that loses (an older cell, a dominated
update, an update of a record still to come) makes none, and a record that appears, changes
or disappears makes exactly one. So a subscriber that folds the changes in order into a copy of
the table holds what a query of the table answers (a property test checks it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from sync.crdt.state import EntityState
from sync.crdt.values import Value

__all__ = ["ChangeKind", "RowChange", "fold_changes", "row_change"]


class ChangeKind(StrEnum):
    UPSERT = "upsert"  # the row is visible now, with these values (new or changed)
    DELETE = "delete"  # the row was visible and is not any more
    RESET = "reset"  # the table was re-derived from the log (a schema change): read it again


@dataclass(frozen=True, slots=True)
class RowChange:
    kind: ChangeKind
    entity_id: str
    row: dict[str, Value] | None  # UPSERT: every declared column (NULL where unwritten)


def row_change(entity_id: str, before: EntityState, after: EntityState,
               columns: Mapping[str, object], epochs: Mapping[str, int]) -> RowChange | None:
    """The change a subscriber sees when ``entity_id`` goes from ``before`` to ``after`` under
    the table's latest ``columns`` and their ``epochs``; None when its visible row is the same."""
    old = before.row(columns, epochs)
    new = after.row(columns, epochs)
    if new == old:
        return None
    if new is None:
        return RowChange(ChangeKind.DELETE, entity_id, None)
    return RowChange(ChangeKind.UPSERT, entity_id, new)


def fold_changes(rows: Mapping[str, dict[str, Value]],
                 changes: list[RowChange]) -> dict[str, dict[str, Value]]:
    """``rows`` (entity id -> visible row) with ``changes`` applied in order (a subscriber's
    copy of the table; a RESET change is the subscriber's cue to read the table again)."""
    out = dict(rows)
    for change in changes:
        if change.kind is ChangeKind.UPSERT:
            assert change.row is not None
            out[change.entity_id] = dict(change.row)
        elif change.kind is ChangeKind.DELETE:
            out.pop(change.entity_id, None)
    return out
