"""SQL storage (SQLAlchemy Core): schema, engine, migrations, repositories.

The only package that issues SQL. Repository functions take a ``Connection`` and return frozen
dataclasses; the daemon runs them in worker threads.
"""

from __future__ import annotations

from storage.blocks import (
    BlockChange,
    BlockHead,
    BlockRow,
    block_at,
    block_by_hash,
    get_head,
    last_change_seq,
    log_changes,
    put_head,
    read_changes,
    set_canonical,
    store_blocks,
)
from storage.engine import make_engine, redacted_url, write_transaction
from storage.events import (
    AppendResult,
    EventRecord,
    StoredEvent,
    append_events,
    column_bounds,
    count_events,
    count_from_lamport,
    event_row,
    events_by_keys,
    events_by_message_ids,
    existing_keys,
    insert_rows,
    key_at,
    keys_in_range,
    max_seq,
    range_hash,
    read_channel,
    read_channel_ordered,
    read_channels_after,
    read_events_after,
    record_problem,
)
from storage.keystore import SqlKeyStore
from storage.migrate import current_revision, head_revision, upgrade
from storage.schema import LANE_COLUMNS, block_head, block_log, blocks, events, metadata, node_state
from storage.state import delete_state, get_state, list_state, put_state

__all__ = [
    "LANE_COLUMNS",
    "AppendResult",
    "BlockChange",
    "BlockHead",
    "BlockRow",
    "EventRecord",
    "SqlKeyStore",
    "StoredEvent",
    "append_events",
    "block_at",
    "block_by_hash",
    "block_head",
    "block_log",
    "blocks",
    "column_bounds",
    "count_events",
    "count_from_lamport",
    "current_revision",
    "delete_state",
    "event_row",
    "events",
    "events_by_keys",
    "events_by_message_ids",
    "existing_keys",
    "get_head",
    "get_state",
    "head_revision",
    "insert_rows",
    "key_at",
    "keys_in_range",
    "last_change_seq",
    "list_state",
    "log_changes",
    "make_engine",
    "max_seq",
    "metadata",
    "node_state",
    "put_head",
    "put_state",
    "range_hash",
    "read_changes",
    "read_channel",
    "read_channel_ordered",
    "read_channels_after",
    "read_events_after",
    "record_problem",
    "redacted_url",
    "set_canonical",
    "store_blocks",
    "upgrade",
    "write_transaction",
]
