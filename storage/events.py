"""Repository functions for the event log. Each takes a ``Connection`` inside a transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, func, select, tuple_
from sqlalchemy.sql.elements import ColumnElement

from storage.schema import LANE_COLUMNS, events
from sync.recon.sha256a import Sha256a, lanes_of
from sync.stored_event import EventRecord

__all__ = [
    "VALUE_COLUMNS",
    "AppendResult",
    "EventRecord",
    "StoredEvent",
    "append_events",
    "column_bounds",
    "count_events",
    "count_from_lamport",
    "event_row",
    "event_values",
    "events_by_keys",
    "events_by_message_ids",
    "existing_keys",
    "insert_rows",
    "insert_values",
    "key_at",
    "keys_in_range",
    "max_seq",
    "range_hash",
    "read_channel",
    "read_channel_newest",
    "read_channel_ordered",
    "read_channels_after",
    "read_events_after",
    "record_problem",
    "seqs_of_message_ids",
    "stored_message_ids",
]

_MOD32 = 4294967296
# Keep each INSERT's bound-parameter count well under SQLite's 32,766 limit.
_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class StoredEvent:
    seq: int
    recon_key: bytes
    message_id: str
    channel: str
    sender: str
    lamport: int
    wire: bytes
    received_at: int


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Which events of a batch were new (with their sequence numbers), which were stored
    already, and which cannot be stored at all (message id -> why), so were left out."""

    inserted: tuple[tuple[int, str], ...]
    duplicates: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...] = ()


_INT64_MAX = (1 << 63) - 1


def _max_length(column: str) -> int:
    length = getattr(events.c[column].type, "length", None)
    assert isinstance(length, int)
    return length


_TEXT_LIMITS = {name: _max_length(name) for name in ("message_id", "channel", "sender")}


def record_problem(record: EventRecord) -> str | None:
    """Why ``record`` cannot be stored on every backend (SQL ranges, column sizes), or None.

    Checked before the insert so that one such event never fails the batch it travels in.
    """
    if not 0 <= record.lamport <= _INT64_MAX:
        return "lamport outside the signed 64-bit range"
    for name, limit in _TEXT_LIMITS.items():
        value = getattr(record, name)
        if not value or len(value) > limit:
            return f"{name} empty or longer than {limit}"
    if not record.recon_key or not record.wire:
        return "empty recon key or wire"
    return None


_COLUMNS = (
    events.c.seq,
    events.c.recon_key,
    events.c.message_id,
    events.c.channel,
    events.c.sender,
    events.c.lamport,
    events.c.wire,
    events.c.received_at,
)


def _stored(row: Sequence[object]) -> StoredEvent:
    return StoredEvent(*row)  # type: ignore[arg-type]


def event_row(record: EventRecord, received_at: int) -> dict[str, object]:
    """The ``events`` row of a record, with the Sha256a lanes of its Recon key."""
    row: dict[str, object] = {
        "recon_key": record.recon_key,
        "message_id": record.message_id,
        "channel": record.channel,
        "sender": record.sender,
        "lamport": record.lamport,
        "wire": record.wire,
        "received_at": received_at,
    }
    row.update(zip(LANE_COLUMNS, record.lanes or lanes_of(record.recon_key), strict=True))
    return row


def insert_rows(conn: Connection, rows: Sequence[dict[str, object]]) -> None:
    """Bulk load (generated logs): one plain ``executemany``, no conflict handling; a
    duplicate is an error, so callers use it only on logs they know are new."""
    if rows:
        conn.execute(events.insert(), list(rows))


#: The columns of :func:`event_values` tuples, in order.
VALUE_COLUMNS = ("recon_key", "message_id", "channel", "sender", "lamport", "wire",
                 "received_at", *LANE_COLUMNS)
_VALUES = f"({', '.join(VALUE_COLUMNS)}) VALUES ({', '.join('?' * len(VALUE_COLUMNS))})"
_SQLITE_INSERT = f"INSERT INTO events {_VALUES} ON CONFLICT DO NOTHING"
_SQLITE_LOAD = f"INSERT INTO events {_VALUES}"


def event_values(record: EventRecord, received_at: int) -> tuple[object, ...]:
    """The ``events`` row of a record as a plain tuple in :data:`VALUE_COLUMNS` order (cheap
    to pickle between processes and to bind)."""
    return (record.recon_key, record.message_id, record.channel, record.sender, record.lamport,
            record.wire, received_at, *(record.lanes or lanes_of(record.recon_key)))


def insert_values(conn: Connection, rows: Sequence[tuple[object, ...]]) -> None:
    """Bulk load of :func:`event_values` tuples (snapshot bootstrap) into a log known not to
    hold them: no conflict handling, a duplicate is an error. On SQLite through the driver's
    own ``executemany`` (SQLAlchemy's per-row parameter processing cost as much as the
    insert); elsewhere through SQLAlchemy's."""
    if not rows:
        return
    if conn.dialect.name == "sqlite":
        dbapi = conn.connection.driver_connection
        assert dbapi is not None
        cursor = dbapi.cursor()
        try:
            cursor.executemany(_SQLITE_LOAD, rows)
        finally:
            cursor.close()
    else:
        conn.execute(events.insert(), [dict(zip(VALUE_COLUMNS, r, strict=True)) for r in rows])


def _append_sqlite(
    conn: Connection, records: Iterable[EventRecord], received_at: int
) -> list[tuple[int, str]]:
    """The SQLite write path on the driver's own executemany (a catch-up stores thousands of
    events a second; SQLAlchemy's per-row parameter processing cost as much as the insert).

    The caller holds the write lock (``write_transaction``), so the rows this call inserted
    are exactly those with a ``seq`` above the largest one before it.
    """
    dbapi = conn.connection.driver_connection
    assert dbapi is not None
    cursor = dbapi.cursor()
    try:
        before = cursor.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
        cursor.executemany(_SQLITE_INSERT, [event_values(r, received_at) for r in records])
        rows = cursor.execute("SELECT seq, message_id FROM events WHERE seq > ? ORDER BY seq",
                              (before,)).fetchall()
    finally:
        cursor.close()
    return [(int(seq), str(mid)) for seq, mid in rows]


_PG_TYPES = ("bytea", "text", "text", "text", "bigint", "bytea", "bigint",
             *("bigint",) * len(LANE_COLUMNS))
_PG_INSERT = (f"INSERT INTO events ({', '.join(VALUE_COLUMNS)}) "
              f"SELECT * FROM unnest({', '.join(f'%s::{t}[]' for t in _PG_TYPES)}) "
              "ON CONFLICT DO NOTHING RETURNING seq, message_id")


def _append_postgresql(
    conn: Connection, records: Iterable[EventRecord], received_at: int
) -> list[tuple[int, str]]:
    """The PostgreSQL write path: one INSERT of column arrays (``unnest``) on the driver.

    SQLAlchemy's ``insertmanyvalues`` processed every parameter of every row in Python
    (~177 us an event in the daemon during a catch-up); psycopg adapts a list per column in
    C and the server gets one statement per batch. ``ON CONFLICT DO NOTHING`` makes it as
    idempotent as the SQLite path; ``RETURNING`` names exactly the rows this call inserted.
    """
    rows = list(records)
    lanes = [r.lanes or lanes_of(r.recon_key) for r in rows]
    columns: list[list[Any]] = [
        [r.recon_key for r in rows], [r.message_id for r in rows], [r.channel for r in rows],
        [r.sender for r in rows], [r.lamport for r in rows], [r.wire for r in rows],
        [received_at] * len(rows), *([lane[i] for lane in lanes] for i in range(8)),
    ]
    dbapi = conn.connection.driver_connection
    assert dbapi is not None
    cursor = dbapi.cursor()
    try:
        cursor.execute(_PG_INSERT, columns)
        returned = cursor.fetchall()
    finally:
        cursor.close()
    return [(int(seq), str(mid)) for seq, mid in returned]


def append_events(
    conn: Connection, batch: Sequence[EventRecord], received_at: int
) -> AppendResult:
    """Insert a batch idempotently: an event already stored (same id or key) is a no-op.

    Call it inside ``write_transaction`` (which takes SQLite's write lock at BEGIN), as every
    writer of a node database does: on SQLite the inserted rows are found by their ``seq``.
    """
    unique: dict[str, EventRecord] = {}
    repeated: list[str] = []
    rejected: list[tuple[str, str]] = []
    for record in batch:
        problem = record_problem(record)
        if problem is not None:
            rejected.append((record.message_id, problem))
        elif record.message_id in unique:
            repeated.append(record.message_id)
        else:
            unique[record.message_id] = record
    inserted: list[tuple[int, str]] = []
    if unique and conn.dialect.name == "sqlite":
        inserted = _append_sqlite(conn, unique.values(), received_at)
    elif unique:
        inserted = _append_postgresql(conn, unique.values(), received_at)
    inserted.sort()
    new_ids = {m for _, m in inserted}
    duplicates = [m for m in unique if m not in new_ids] + repeated
    return AppendResult(tuple(inserted), tuple(duplicates), tuple(rejected))


def read_channel(
    conn: Connection, channel: str, after_seq: int = 0, limit: int = 1000
) -> list[StoredEvent]:
    """Events of ``channel`` stored after the cursor ``after_seq``, in local storage order."""
    stmt = (
        select(*_COLUMNS)
        .where(events.c.channel == channel, events.c.seq > after_seq)
        .order_by(events.c.seq)
        .limit(limit)
    )
    return [_stored(r) for r in conn.execute(stmt)]


def read_channel_ordered(
    conn: Connection,
    channel: str,
    after: tuple[int, str] | None = None,
    limit: int = 1000,
) -> list[StoredEvent]:
    """Events of ``channel`` in log order (lamport, message_id): the same on every node."""
    stmt = select(*_COLUMNS).where(events.c.channel == channel)
    if after is not None:
        stmt = stmt.where(tuple_(events.c.lamport, events.c.message_id) > tuple_(*after))
    stmt = stmt.order_by(events.c.lamport, events.c.message_id).limit(limit)
    return [_stored(r) for r in conn.execute(stmt)]


def read_channel_newest(conn: Connection, channel: str, limit: int) -> list[StoredEvent]:
    """The newest ``limit`` events of ``channel``, in log order (a channel's restart reads
    this much of its log, however long the log is: index ``ix_events_channel_lamport``)."""
    stmt = (
        select(*_COLUMNS)
        .where(events.c.channel == channel)
        .order_by(events.c.lamport.desc(), events.c.message_id.desc())
        .limit(limit)
    )
    rows = [_stored(r) for r in conn.execute(stmt)]
    rows.reverse()
    return rows


def stored_message_ids(conn: Connection, channel: str, ids: Iterable[str]) -> set[str]:
    """Those of ``ids`` stored in ``channel``'s log.

    Looked up by ``message_id`` alone (unique) and the channel compared here: with the channel
    in the WHERE clause SQLite's planner chose ``ix_events_channel_lamport (channel=?)``, a
    scan of the channel's whole log per question (~100 ms at 450,000 events; SDS asks this on
    its event loop during a catch-up).
    """
    wanted = list(ids)
    found: set[str] = set()
    for start in range(0, len(wanted), _CHUNK):
        stmt = select(events.c.message_id, events.c.channel).where(
            events.c.message_id.in_(wanted[start : start + _CHUNK]))
        found.update(str(m) for m, c in conn.execute(stmt) if c == channel)
    return found


def seqs_of_message_ids(conn: Connection, ids: Iterable[str]) -> dict[str, int]:
    """The seq of each of ``ids`` that is stored (any channel)."""
    wanted = list(dict.fromkeys(ids))
    found: dict[str, int] = {}
    for start in range(0, len(wanted), _CHUNK):
        stmt = select(events.c.message_id, events.c.seq).where(
            events.c.message_id.in_(wanted[start : start + _CHUNK]))
        found.update((str(m), int(seq)) for m, seq in conn.execute(stmt))
    return found


def read_events_after(conn: Connection, after_seq: int, limit: int = 1000) -> list[StoredEvent]:
    """Events of every channel after ``after_seq`` in storage order."""
    stmt = select(*_COLUMNS).where(events.c.seq > after_seq).order_by(events.c.seq).limit(limit)
    return [_stored(r) for r in conn.execute(stmt)]


def column_bounds(conn: Connection, column: str) -> tuple[int, int, int]:
    """(min, max, row count) of an integer column of ``events`` (``seq`` or ``lamport``)."""
    col = events.c[column]
    lo, hi, n = conn.execute(select(func.min(col), func.max(col), func.count())).one()
    return int(lo or 0), int(hi or 0), int(n)


def count_from_lamport(conn: Connection, lamport: int) -> int:
    """Events with a Lamport timestamp of at least ``lamport``."""
    stmt = select(func.count()).select_from(events).where(events.c.lamport >= lamport)
    return int(conn.execute(stmt).scalar_one())


def lamports_from(conn: Connection, lamport: int) -> tuple[int, int, int]:
    """(oldest, newest Lamport timestamp, count) of the events stamped ``lamport`` or later
    (zeros when there are none)."""
    col = events.c.lamport
    stmt = select(func.min(col), func.max(col), func.count()).where(col >= lamport)
    lo, hi, n = conn.execute(stmt).one()
    return int(lo or 0), int(hi or 0), int(n)


def read_channels_after(
    conn: Connection, channels: Sequence[str], after_seq: int, limit: int
) -> list[StoredEvent]:
    """Events of any of ``channels`` after ``after_seq``, in storage order."""
    stmt = (
        select(*_COLUMNS)
        .where(events.c.channel.in_(list(channels)), events.c.seq > after_seq)
        .order_by(events.c.seq)
        .limit(limit)
    )
    return [_stored(r) for r in conn.execute(stmt)]


def count_events(conn: Connection, channel: str | None = None) -> int:
    stmt = select(func.count()).select_from(events)
    if channel is not None:
        stmt = stmt.where(events.c.channel == channel)
    return int(conn.execute(stmt).scalar_one())


def max_seq(conn: Connection) -> int:
    return int(conn.execute(select(func.coalesce(func.max(events.c.seq), 0))).scalar_one())


def _in_range(stmt: Select[Any], lo: bytes, hi: bytes | None) -> Select[Any]:
    cond: list[ColumnElement[bool]] = [events.c.recon_key >= lo]
    if hi is not None:
        cond.append(events.c.recon_key < hi)
    return stmt.where(*cond)


def range_hash(conn: Connection, lo: bytes, hi: bytes | None) -> Sha256a:
    """Sha256a and count of the keys in [lo, hi) (hi None: unbounded), summed in SQL.

    Integer ``SUM`` is exact (SQLite's float ``TOTAL`` is not past ~4M rows); the mod 2^32 is
    applied in SQL so the database returns lane values directly.
    """
    sums = [func.coalesce(func.sum(events.c[name]), 0) % _MOD32 for name in LANE_COLUMNS]
    stmt = _in_range(select(func.count(), *sums).select_from(events), lo, hi)
    row = conn.execute(stmt).one()
    return Sha256a(tuple(int(v) for v in row[1:]), int(row[0]))


def keys_in_range(conn: Connection, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]:
    stmt = _in_range(select(events.c.recon_key), lo, hi)
    stmt = stmt.order_by(events.c.recon_key).limit(limit)
    return [bytes(k) for (k,) in conn.execute(stmt)]


def key_at(conn: Connection, lo: bytes, hi: bytes | None, rank: int) -> bytes | None:
    """The ``rank``-th (0-based) key in [lo, hi), or None when the range holds fewer keys."""
    stmt = _in_range(select(events.c.recon_key), lo, hi)
    stmt = stmt.order_by(events.c.recon_key).offset(rank).limit(1)
    row = conn.execute(stmt).first()
    return None if row is None else bytes(row[0])


def existing_keys(conn: Connection, keys: Iterable[bytes]) -> set[bytes]:
    """Those of ``keys`` stored. Straight SQL on the driver: Recon asks this of every key a
    peer lists (a 1,000,000-event catch-up: every key once), and SQLAlchemy's compiling and
    processing of each IN list's parameters cost several times the lookup itself."""
    wanted = list(keys)
    found: set[bytes] = set()
    postgres = conn.dialect.name == "postgresql"
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start : start + _CHUNK]
        if postgres:
            rows = conn.exec_driver_sql(
                "SELECT recon_key FROM events WHERE recon_key = ANY(%s)", (chunk,))
        else:
            marks = ",".join("?" * len(chunk))
            rows = conn.exec_driver_sql(
                f"SELECT recon_key FROM events WHERE recon_key IN ({marks})", tuple(chunk))
        found.update(bytes(k) for (k,) in rows)
    return found


def events_by_keys(conn: Connection, keys: Iterable[bytes]) -> list[StoredEvent]:
    return _select_in(conn, events.c.recon_key, list(keys))


def events_by_message_ids(conn: Connection, ids: Iterable[str]) -> list[StoredEvent]:
    return _select_in(conn, events.c.message_id, list(ids))


def _select_in(conn: Connection, column: Any, wanted: list[Any]) -> list[StoredEvent]:
    out: list[StoredEvent] = []
    for start in range(0, len(wanted), _CHUNK):
        stmt = select(*_COLUMNS).where(column.in_(wanted[start : start + _CHUNK]))
        out.extend(_stored(r) for r in conn.execute(stmt))
    return out


def wire_sizes_by_keys(conn: Connection, keys: Iterable[bytes]) -> list[tuple[bytes, int]]:
    """``(recon key, wire length)`` of the stored ones among ``keys``: plan reads by bytes."""
    return _sizes_in(conn, events.c.recon_key, list(keys))


def wire_sizes_by_message_ids(conn: Connection, ids: Iterable[str]) -> list[tuple[str, int]]:
    return _sizes_in(conn, events.c.message_id, list(ids))


def _sizes_in(conn: Connection, column: Any, wanted: list[Any]) -> list[tuple[Any, int]]:
    out: list[tuple[Any, int]] = []
    for start in range(0, len(wanted), _CHUNK):
        stmt = select(column, func.length(events.c.wire)).where(
            column.in_(wanted[start : start + _CHUNK]))
        out.extend((r[0], int(r[1])) for r in conn.execute(stmt))
    return out
