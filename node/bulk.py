"""Bulk insertion of already-validated events into an empty or append-only log.

``storage.append_events`` is the node's idempotent write path (conflict checks, ``RETURNING``);
loading a snapshot or a generated test log into an empty database needs none of that, and a plain
``executemany`` of the Core insert is an order of magnitude faster. Rows carry their Sha256a
lanes like every stored event.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from storage import LANE_COLUMNS, EventRecord, events
from sync.recon.sha256a import lanes_of

__all__ = ["insert_rows", "row_of"]


def row_of(record: EventRecord, received_at: int) -> dict[str, object]:
    """The storage row of a record (lanes computed from its Recon key)."""
    row: dict[str, object] = {
        "recon_key": record.recon_key,
        "message_id": record.message_id,
        "channel": record.channel,
        "sender": record.sender,
        "lamport": record.lamport,
        "wire": record.wire,
        "received_at": received_at,
    }
    row.update(zip(LANE_COLUMNS, lanes_of(record.recon_key), strict=True))
    return row


def insert_rows(conn: Connection, rows: Sequence[dict[str, object]]) -> None:
    """Insert rows in one ``executemany``; a duplicate key is an error (the caller checked)."""
    if rows:
        conn.execute(events.insert(), list(rows))
