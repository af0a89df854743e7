"""Replicated table schemas and message validation against them.

Validation depends only on the message and the schema in force at its timestamp (see
``sync.crdt.declaration``), never on replica state, so every replica that knows the same schema
declarations rejects exactly the same messages; a rejected message changes nothing at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from sync.crdt.message import RESERVED_COLUMN, CrdtMessage
from sync.crdt.values import ColumnType, is_identifier

__all__ = [
    "RejectReason",
    "Rejection",
    "TableSchema",
    "schemas_by_name",
    "validate_against",
    "validate_message",
]


class RejectReason(StrEnum):
    UNKNOWN_TABLE = "unknown_table"
    UNKNOWN_COLUMN = "unknown_column"
    BAD_TYPE = "bad_type"
    UNAUTHORISED_WRITER = "unauthorised_writer"


@dataclass(frozen=True)
class Rejection:
    """Why a message was refused: a stable ``reason`` to count and a human ``detail``."""

    reason: RejectReason
    detail: str


@dataclass(frozen=True, eq=False)
class TableSchema:
    """A replicated table: column name -> type, and optionally the peer ids allowed to write.

    ``columns`` accepts ``ColumnType`` members or their names (``"text"``, ``"integer"``,
    ``"real"``, ``"boolean"``), as config files give them, and holds ``ColumnType`` members
    afterwards (``column_type`` returns them typed). ``writers=None`` lets anyone write.
    The column ``id`` is reserved for the entity id. Bad declarations raise ``ValueError``.
    """

    name: str
    columns: Mapping[str, ColumnType | str]
    writers: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not is_identifier(self.name):
            raise ValueError(f"table name {self.name!r} is not an identifier")
        normalised: dict[str, ColumnType] = {}
        # Declared order is kept: it is the order people see columns in (db query, get).
        for column, kind in self.columns.items():
            if not is_identifier(column):
                raise ValueError(f"table {self.name}: column name {column!r} is not an identifier")
            if column == RESERVED_COLUMN:
                raise ValueError(f"table {self.name}: column {RESERVED_COLUMN!r} is reserved")
            try:
                normalised[column] = ColumnType(kind)
            except ValueError:
                known = ", ".join(t.value for t in ColumnType)
                raise ValueError(
                    f"table {self.name}: column {column} has unknown type {kind!r} ({known})"
                ) from None
        object.__setattr__(self, "columns", MappingProxyType(normalised))
        if self.writers is not None:
            writers = frozenset(self.writers)
            if not all(isinstance(w, str) and w for w in writers):
                raise ValueError(f"table {self.name}: writers must be non-empty peer id strings")
            object.__setattr__(self, "writers", writers)

    def column_type(self, column: str) -> ColumnType | None:
        """The declared type of ``column``, or None if the table has no such column."""
        kind = self.columns.get(column)
        # Declared types are normalised on construction: the enum call is only a fallback.
        return kind if kind is None or isinstance(kind, ColumnType) else ColumnType(kind)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TableSchema):
            return NotImplemented
        return (self.name, dict(self.columns), self.writers) == (
            other.name,
            dict(other.columns),
            other.writers,
        )

    def __hash__(self) -> int:
        # Sorted, as __eq__ ignores the order.
        return hash((self.name, tuple(sorted(self.columns.items())), self.writers))


def schemas_by_name(schemas: Iterable[TableSchema]) -> Mapping[str, TableSchema]:
    """Index schemas by table name; a name declared twice raises ``ValueError``."""
    index: dict[str, TableSchema] = {}
    for schema in schemas:
        if schema.name in index:
            raise ValueError(f"table {schema.name} declared twice")
        index[schema.name] = schema
    return MappingProxyType(index)


def validate_message(schemas: Mapping[str, TableSchema], message: CrdtMessage) -> Rejection | None:
    """The first reason ``message`` must be refused, or None if it is acceptable.

    Checked in this order: table, writer, columns (sorted), value types.
    """
    return validate_against(schemas.get(message.table), message)


def validate_against(schema: TableSchema | None, message: CrdtMessage) -> Rejection | None:
    """``validate_message`` against one schema (None: the table is not declared)."""
    if schema is None:
        return Rejection(RejectReason.UNKNOWN_TABLE, f"no replicated table {message.table!r}")
    if schema.writers is not None and message.sender not in schema.writers:
        return Rejection(
            RejectReason.UNAUTHORISED_WRITER,
            f"peer {message.sender} may not write table {message.table}",
        )
    for column, value in message.values.items():
        kind = schema.column_type(column)
        if kind is None:
            return Rejection(
                RejectReason.UNKNOWN_COLUMN, f"table {message.table} has no column {column!r}"
            )
        if not kind.accepts(value):
            return Rejection(
                RejectReason.BAD_TYPE,
                f"{message.table}.{column} is {kind.value}, got {type(value).__name__}",
            )
    return None
