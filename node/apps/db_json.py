"""The JSON views of the ``/v1/db`` API: schemas, a table's history, rows, typed values."""

from __future__ import annotations

import math
from typing import Any

from storage.crdt import StoredRow
from sync.crdt import ColumnType, TableHistory, TableSchema, Value

__all__ = ["history_json", "row_json", "schema_json", "typed_values"]


def schema_json(schema: TableSchema) -> dict[str, Any]:
    return {"columns": {c: ColumnType(t).value for c, t in schema.columns.items()},
            "writers": None if schema.writers is None else sorted(schema.writers)}


def history_json(history: TableHistory) -> dict[str, Any]:
    return {
        "table": history.table,
        "owner": history.owner,
        "versions": [{"version": i + 1, "lamport": v.timestamp, "sender": v.sender,
                      **schema_json(v.schema)} for i, v in enumerate(history.versions)],
        "epochs": _declared_order(history),
    }


def _declared_order(history: TableHistory) -> dict[str, int]:
    """Column epochs in the latest version's column order, columns it dropped after, by name."""
    order = list(history.latest.columns) if history.latest is not None else []
    rest = sorted(set(history.epochs) - set(order))
    return {c: history.epochs[c] for c in [*order, *rest] if c in history.epochs}


def row_json(schema: TableSchema, row: StoredRow) -> dict[str, Value]:
    """The row with every declared column (null where never written), its id under ``id``."""
    return {"id": row.entity_id, **{c: row.values.get(c) for c in schema.columns}}


def typed_values(schema: TableSchema, values: dict[str, Any]) -> dict[str, Any]:
    # JSON has one number type for clients: a whole number is accepted for a real column.
    out = dict(values)
    for column, value in values.items():
        if (schema.column_type(column) is ColumnType.REAL and isinstance(value, int)
                and not isinstance(value, bool) and math.isfinite(value)):
            out[column] = float(value)
    return out
