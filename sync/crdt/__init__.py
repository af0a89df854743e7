"""The Spindexer CRDT on the event log: messages, schemas, LWW rules and a reference replica.

Sans-IO: the rules are pure functions, time is passed in as int milliseconds. See docs/crdt.md.
"""

from __future__ import annotations

from sync.crdt.changes import ChangeKind, RowChange, fold_changes, row_change
from sync.crdt.declaration import (
    MAX_COLUMNS,
    MAX_WRITERS,
    Added,
    SchemaBook,
    SchemaDeclaration,
    TableHistory,
    decode_content,
)
from sync.crdt.effects import (
    Compacted,
    CreateRecord,
    Effect,
    NoteUpsert,
    Reject,
    SetCell,
    Tombstone,
    count_effects,
)
from sync.crdt.message import (
    ENCODING_VERSION,
    MAX_ENTITY_ID_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_TIMESTAMP,
    RESERVED_COLUMN,
    CrdtMessage,
    Operation,
    decode_message,
    encode_message,
)
from sync.crdt.replica import MemoryReplica, Row, Tables
from sync.crdt.rules import Schemas, compact_entity, plan, reduce_entity, schema_for, step
from sync.crdt.schema import (
    Rejection,
    RejectReason,
    TableSchema,
    schemas_by_name,
    validate_against,
    validate_message,
)
from sync.crdt.state import EMPTY, Cell, EntityState, Version, cell_wins
from sync.crdt.values import (
    INT64_MAX,
    INT64_MIN,
    ColumnType,
    Value,
    parse_assignments,
    parse_typed,
    value_text,
)

__all__ = [
    "EMPTY",
    "ENCODING_VERSION",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_COLUMNS",
    "MAX_ENTITY_ID_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_TIMESTAMP",
    "MAX_WRITERS",
    "RESERVED_COLUMN",
    "Added",
    "Cell",
    "ChangeKind",
    "ColumnType",
    "Compacted",
    "CrdtMessage",
    "CreateRecord",
    "Effect",
    "EntityState",
    "MemoryReplica",
    "NoteUpsert",
    "Operation",
    "Reject",
    "RejectReason",
    "Rejection",
    "Row",
    "RowChange",
    "SchemaBook",
    "SchemaDeclaration",
    "Schemas",
    "SetCell",
    "TableHistory",
    "TableSchema",
    "Tables",
    "Tombstone",
    "Value",
    "Version",
    "cell_wins",
    "compact_entity",
    "count_effects",
    "decode_content",
    "decode_message",
    "encode_message",
    "fold_changes",
    "parse_assignments",
    "parse_typed",
    "plan",
    "reduce_entity",
    "row_change",
    "schema_for",
    "schemas_by_name",
    "step",
    "validate_against",
    "validate_message",
    "value_text",
]
