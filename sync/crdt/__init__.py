"""The Spindexer CRDT on the event log: messages, schemas, LWW rules and a reference replica.

Sans-IO: the rules are pure functions, time is passed in as int milliseconds. See docs/crdt.md.
"""

from __future__ import annotations

from sync.crdt.effects import (
    CreateRecord,
    DropFromMempool,
    DropReason,
    Effect,
    HoldInMempool,
    NoteUpsert,
    Reject,
    ReleaseFromMempool,
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
from sync.crdt.rules import (
    DEFAULT_LIMITS,
    MempoolLimits,
    expired_held,
    next_expiry_ms,
    plan,
    reduce_entity,
    step,
)
from sync.crdt.schema import (
    Rejection,
    RejectReason,
    TableSchema,
    schemas_by_name,
    validate_message,
)
from sync.crdt.state import EMPTY, Cell, EntityState, Held, Version, cell_wins
from sync.crdt.values import INT64_MAX, INT64_MIN, ColumnType, Value, value_text

__all__ = [
    "DEFAULT_LIMITS",
    "EMPTY",
    "ENCODING_VERSION",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_ENTITY_ID_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_TIMESTAMP",
    "RESERVED_COLUMN",
    "Cell",
    "ColumnType",
    "CrdtMessage",
    "CreateRecord",
    "DropFromMempool",
    "DropReason",
    "Effect",
    "EntityState",
    "Held",
    "HoldInMempool",
    "MemoryReplica",
    "MempoolLimits",
    "NoteUpsert",
    "Operation",
    "Reject",
    "RejectReason",
    "Rejection",
    "ReleaseFromMempool",
    "Row",
    "SetCell",
    "TableSchema",
    "Tables",
    "Tombstone",
    "Value",
    "Version",
    "cell_wins",
    "count_effects",
    "decode_message",
    "encode_message",
    "expired_held",
    "next_expiry_ms",
    "plan",
    "reduce_entity",
    "schemas_by_name",
    "step",
    "validate_message",
    "value_text",
]
