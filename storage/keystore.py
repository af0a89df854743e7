"""Recon key stores over the events table.

``SqlKeyStore`` answers every query in SQL: range hashes are ``SUM`` over the stored Sha256a lanes
(see ``storage.events.range_hash``), O(range) per query, fine for tools and tests.

The node uses ``sync.recon.SummaryKeyStore`` instead: the keys stay in the table, memory holds a
bounded bucket summary (``open_summary_store``), a range hash reads at most the two buckets its
bounds fall in (docs/architecture.md, "Recon key store"), and the store asks for those reads:
its driver makes them with :class:`SqlKeyReader`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sqlalchemy import Engine

from storage.events import count_events, existing_keys, key_at, keys_in_range, range_hash
from sync.errors import LocalProtocolError
from sync.recon.buckets import BucketSummary
from sync.recon.sha256a import Sha256a, wide_of
from sync.recon.summary import SummaryKeyStore

__all__ = ["SqlKeyReader", "SqlKeyStore", "open_summary_store", "scan_buckets"]


class SqlKeyStore:
    """Implements ``sync.recon.KeyStore``; every call runs its own short read."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def insert(self, key: bytes) -> bool:
        if self.contains(key):
            return False
        raise LocalProtocolError("keys enter the SQL key store with their events (append_events)")

    def contains(self, key: bytes) -> bool:
        with self.engine.connect() as conn:
            return bool(existing_keys(conn, [key]))

    def range_hash(self, lo: bytes, hi: bytes) -> Sha256a:
        with self.engine.connect() as conn:
            return range_hash(conn, lo, hi)

    def count(self, lo: bytes, hi: bytes) -> int:
        return self.range_hash(lo, hi).count

    def keys(self, lo: bytes, hi: bytes, limit: int) -> list[bytes]:
        if limit <= 0:
            return []
        with self.engine.connect() as conn:
            return keys_in_range(conn, lo, hi, limit)

    def key_at(self, lo: bytes, hi: bytes, rank: int) -> bytes:
        with self.engine.connect() as conn:
            key = key_at(conn, lo, hi, rank) if rank >= 0 else None
        if key is None:
            raise LocalProtocolError(f"no key of rank {rank} in the range")
        return key

    def __len__(self) -> int:
        with self.engine.connect() as conn:
            return count_events(conn)


class SqlKeyReader:
    """The events table as the ``sync.recon.KeyReader`` with which a ``SummaryKeyStore``'s driver
    answers its reads (``sync.recon.read_keys``).

    Reads run on the caller's thread, each in its own short connection: one indexed range scan
    of at most a bucket of keys, or one ``IN`` lookup per 500 keys.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def present(self, keys: Sequence[bytes]) -> set[bytes]:
        if not keys:
            return set()
        with self.engine.connect() as conn:
            return existing_keys(conn, keys)

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]:
        # Straight through the driver: SQLAlchemy's result handling cost more than the read
        # itself (a bucket of 384 keys: 1.1 ms through Core, 0.5 ms with its hashes this way).
        mark = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"
        sql = f"SELECT recon_key FROM events WHERE recon_key >= {mark}"
        params: tuple[object, ...] = (lo,)
        if hi is not None:
            sql += f" AND recon_key < {mark}"
            params += (hi,)
        sql += f" ORDER BY recon_key LIMIT {int(limit)}"
        conn = self.engine.raw_connection()
        try:
            cursor = conn.cursor()
            cursor.execute(sql, params)
            rows = cursor.fetchall()
            cursor.close()
        finally:
            conn.close()
        return [bytes(k) for (k,) in rows]


def scan_buckets(engine: Engine, load: int, page: int = 50_000) -> Iterator[tuple[bytes, int, int]]:
    """``(start, count, wide sum)`` of consecutive buckets of ``load`` keys over every stored key.

    One ascending pass over the ``recon_key`` index in pages of ``page`` keys, so memory stays
    at one page whatever the log's length; the first bucket starts at ``b""``.
    """
    reader = SqlKeyReader(engine)
    start, count, wide = b"", 0, 0
    cursor = b""
    while True:
        keys = reader.keys(cursor, None, page)
        for key in keys:
            if count == load:
                yield start, count, wide
                start, count, wide = key, 0, 0
            count += 1
            wide += wide_of(key)
        if len(keys) < page:
            break
        cursor = keys[-1] + b"\0"
    yield start, count, wide


def open_summary_store(
    engine: Engine, *, load: int, max_buckets: int, cache_keys: int
) -> SummaryKeyStore:
    """A ``SummaryKeyStore`` over the events table, its summary rebuilt by one index scan."""
    summary = BucketSummary.restore(scan_buckets(engine, load), load=load,
                                    max_buckets=max_buckets)
    return SummaryKeyStore(summary, cache_keys=cache_keys)
