"""Build a large log of real signed SDS events straight into a node's SQLite database.

Used by ``cluster_bench.py`` for the catch-up figure: writing the events through the node's API
would take minutes on a loaded 2-core machine, and what is measured is the *fetching* node.
The events are exactly what a node stores: ``SdsChannel.send`` makes and signs them (with causal
history and Lamport clocks), ``Delivered.wire`` is the canonical wire, ``record_of_delivered``
adds the Recon key, ``storage.append_events`` writes them.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine

from storage import EventRecord, append_events, make_engine, upgrade
from sync.identity import peer_id_of
from sync.sds import Delivered, SdsChannel
from sync.stored_event import record_of_delivered

T0 = 1_700_000_000.0
BATCH = 5_000
# The log is deterministic (seeded keys and clocks), so a built one is kept and copied: building
# it signs every event, which takes long for the 1,000,000-event log (docs/bench/cluster.md).
CACHE_DIR = Path(tempfile.gettempdir()) / "syncnode-bench-cache"
CACHE_VERSION = 1


def cached_log(data_dir: Path, count: int) -> tuple[int, bool]:
    """Put a ``count``-event log into ``data_dir``; returns (events, whether it came from cache)."""
    cached = CACHE_DIR / f"catchup-v{CACHE_VERSION}-{count}.db"
    data_dir.mkdir(parents=True, exist_ok=True)
    if not cached.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=CACHE_DIR))
        stored = build_log(work, count)
        if stored != count:
            raise RuntimeError(f"built {stored} events instead of {count}")
        (work / "syncnode.db").rename(cached)
        shutil.rmtree(work, ignore_errors=True)
        shutil.copyfile(cached, data_dir / "syncnode.db")
        return count, False
    shutil.copyfile(cached, data_dir / "syncnode.db")
    return count, True


def node_database(data_dir: Path) -> Engine:
    """The (migrated) SQLite database a node started on ``data_dir`` will use."""
    data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(f"sqlite:///{(data_dir / 'syncnode.db').resolve()}",
                         sqlite_synchronous="NORMAL")
    upgrade(engine)
    return engine


def build_log(data_dir: Path, count: int, *, channel: str = "general", senders: int = 4,
              network_id: int = 1, content_size: int = 64) -> int:
    """Write ``count`` events by ``senders`` independent authors into ``data_dir``'s database.

    Returns the number of events stored. Each author is its own ``SdsChannel`` (they never see
    each other's messages, so each causal history points into the author's own stream).
    """
    engine = node_database(data_dir)
    try:
        rng = random.Random(7)
        authors = []
        for i in range(senders):
            key = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
            authors.append(SdsChannel(channel, peer_id_of(key), key, None, random.Random(i), T0))
        stored = 0
        batch: list[EventRecord] = []
        for n in range(count):
            ch = authors[n % senders]
            body = f"catchup {n} ".encode()
            ch.send(body + b"." * max(0, content_size - len(body)), T0 + n / 1000)
            for ev in ch.events():
                if isinstance(ev, Delivered):
                    batch.append(record_of_delivered(network_id, channel, ev))
            if len(batch) >= BATCH or n == count - 1:
                with engine.begin() as conn:
                    stored += len(append_events(conn, batch, int(T0 * 1000)).inserted)
                batch = []
        with engine.connect() as conn:
            # Fold the WAL into the main file: the database is copied as that one file.
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return stored
    finally:
        engine.dispose()
