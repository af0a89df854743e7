"""``SqlKeyStore``: the Recon ``KeyStore`` answered by SQL over the events table.

Range hashes are ``SUM`` over the stored Sha256a lanes (see ``storage.events.range_hash``), so a
node can reconcile straight from its database, e.g. in tools or for logs too large to keep in
memory. Keys enter this store only with their events (``append_events``).
"""

from __future__ import annotations

from sqlalchemy import Engine

from storage.events import count_events, existing_keys, key_at, keys_in_range, range_hash
from sync.errors import LocalProtocolError
from sync.recon.sha256a import Sha256a

__all__ = ["SqlKeyStore"]


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
