"""The db channel's log read back: decoding a batch's contents, a table's messages and
declarations in the log, writes stored before schemas were on the log, tombstone compaction.

These read the committed log (and the tables, for compaction) and never touch the
application's in-memory state: :class:`node.apps.db_app.DbApplication` decides when to call
them and takes over what they return once its transaction commits.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator, Sequence

from google.protobuf.message import DecodeError
from sqlalchemy import Connection, func, select

from node.telemetry.logs import kv
from storage import StoredEvent, get_state, read_channel
from storage.crdt import EntityKey, load_states, tombstoned_before, write_states
from storage.schema import events
from sync.crdt import (
    CrdtMessage,
    EntityState,
    SchemaDeclaration,
    compact_entity,
    count_effects,
    decode_content,
)
from sync.errors import RemoteProtocolError
from sync.sds import sds_pb2

__all__ = [
    "COMPACT_CHUNK",
    "LEGACY_KEY",
    "SCAN_CHUNK",
    "channel_max_seq",
    "compact_tombstones",
    "declarations_in_log",
    "decode_batch",
    "decode_batch_received",
    "has_legacy_writes",
    "log_of",
]

log = logging.getLogger("syncnode.db")

# Events read at a time when a table is re-derived from the log, and tombstones compacted per
# batch: both bound the memory a re-evaluation or a compaction needs.
SCAN_CHUNK = 2000
COMPACT_CHUNK = 5000
# Set by migration 0004 on a database that had events: the last seq stored before it.
LEGACY_KEY = "app/db/legacy_seq"

Item = CrdtMessage | SchemaDeclaration


def channel_max_seq(conn: Connection, channel: str) -> int:
    """The storage position of ``channel``'s newest event (0: none)."""
    stmt = select(func.coalesce(func.max(events.c.seq), 0)).where(events.c.channel == channel)
    return int(conn.execute(stmt).scalar_one())


def _content(event: StoredEvent) -> bytes:
    # Stored events were verified on arrival: only their content is needed here.
    return sds_pb2.Message.FromString(event.wire).content


def decode_batch(batch: Sequence[StoredEvent], counts: Counter[str]) -> list[Item]:
    """The CRDT messages and declarations of ``batch``; malformed contents are counted
    (``rejected_malformed``) and logged, never raised."""
    return [item for item, _ in decode_batch_received(batch, counts)]


def decode_batch_received(batch: Sequence[StoredEvent],
                          counts: Counter[str]) -> list[tuple[Item, int]]:
    """``decode_batch`` with each item's ``received_at`` (ms; when the node stored it)."""
    items: list[tuple[Item, int]] = []
    for event in batch:
        try:
            items.append((decode_content(_content(event), timestamp=event.lamport,
                                         sender=event.sender), event.received_at))
        except (RemoteProtocolError, DecodeError) as exc:
            counts["rejected_malformed"] += 1
            detail = exc.reason if isinstance(exc, RemoteProtocolError) else "bad event"
            log.info("rejected crdt message", extra=kv(
                sender=event.sender, seq=event.seq, reason="malformed", detail=detail))
    return items


def log_of(conn: Connection, channel: str, table: str,
           end: int) -> Iterator[tuple[int, list[Item]]]:
    """The messages and declarations of ``table`` in ``channel``'s log up to ``end``, in
    chunks, each with the storage position read up to."""
    marker = json.dumps({"table": table}, separators=(",", ":"))[1:-1].encode()
    after = 0
    while after < end:
        chunk = [e for e in read_channel(conn, channel, after, SCAN_CHUNK) if e.seq <= end]
        if not chunk:
            return
        after = chunk[-1].seq
        items = []
        for event in chunk:
            try:
                content = _content(event)
                if marker in content:  # canonical content: a cheap filter before decoding
                    item = decode_content(content, timestamp=event.lamport, sender=event.sender)
                    if item.table == table:
                        items.append(item)
            except (RemoteProtocolError, DecodeError):
                continue  # counted when the event was first applied
        yield after, items


def declarations_in_log(conn: Connection, channel: str, table: str,
                        end: int) -> list[SchemaDeclaration]:
    return [d for _, chunk in log_of(conn, channel, table, end) for d in chunk
            if isinstance(d, SchemaDeclaration)]


def has_legacy_writes(conn: Connection, channel: str, table: str) -> bool:
    """Whether the log holds writes to ``table`` stored before schemas were on the log (up to
    the seq migration 0004 kept, ``LEGACY_KEY``)."""
    raw = get_state(conn, LEGACY_KEY)
    if raw is None:
        return False
    end = min(int(raw), channel_max_seq(conn, channel))
    return any(isinstance(item, CrdtMessage)
               for _, chunk in log_of(conn, channel, table, end) for item in chunk)


def compact_tombstones(conn: Connection, high: dict[str, int], window: int,
                       done: dict[str, int], compacted: dict[str, int],
                       counts: Counter[str]) -> dict[EntityKey, EntityState]:
    """Forget tombstones older than ``window`` below each table's newest write (run when
    caught up with the log, so that a replay compacts only once it has every write:
    docs/crdt.md). ``done``: the horizon each table is already compacted up to; the horizons
    completed now go to ``compacted``. Returns the compacted entities' new states."""
    out: dict[EntityKey, EntityState] = {}
    for table, newest in sorted(high.items()):
        horizon = newest - window
        if horizon < 0 or horizon <= done.get(table, -1):
            continue
        entities = tombstoned_before(conn, table, horizon, COMPACT_CHUNK)
        if len(entities) < COMPACT_CHUNK:
            compacted[table] = horizon  # all done up to it; else the next batch goes on
        if not entities:
            continue
        before = load_states(conn, [(table, e) for e in entities])
        after: dict[EntityKey, EntityState] = {}
        for (name, entity), state in before.items():
            effects, after[(name, entity)] = compact_entity(name, entity, state, horizon)
            counts.update(count_effects(effects))
        write_states(conn, before, after)
        out.update(after)
    return out
