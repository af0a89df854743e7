"""The Recon key store's summary saved in SQL, and the start-up that restores from it.

A save writes, in one transaction, the encoded :class:`~sync.recon.buckets.BucketSummary`
(``sync.recon.summary_codec``) with its watermark: the highest ``events.seq`` whose key it
holds, and it holds exactly the keys of ``seq <= watermark`` (the daemon's writer commits in
seq order and the key store accounts each commit before the next). Start-up then decodes it
and inserts only the keys above the watermark, instead of scanning every key.

Anything that does not fit falls back to that full scan, with the reason: no row (a new
database, an older release), a row over its size limit or that does not decode (its digest
covers every byte), an event at the watermark that is not the one saved (another log), more
keys above the watermark than replaying them is worth (a bootstrap into the database, a crash
long after the last save), and a few buckets read back from the log that disagree with it.
Deleting or re-keying events empties the table (migration 0006's trigger).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, delete, func, insert, select

from storage.events import max_seq
from storage.keystore import SqlKeyReader, open_summary_store
from storage.schema import events, recon_summary
from sync.errors import RemoteProtocolError
from sync.recon.buckets import BucketSummary
from sync.recon.reads import insert_keys
from sync.recon.sha256a import wide_of
from sync.recon.summary import SummaryKeyStore
from sync.recon.summary_codec import decode_summary, max_summary_bytes

__all__ = ["MAX_KEY_BYTES", "OpenedKeyStore", "log_matches", "open_key_store", "save_summary"]

log = logging.getLogger("syncnode.storage")

MAX_KEY_BYTES = 256  # events.recon_key's length
_TAIL_PAGE = 50_000
_SAMPLES = 8


@dataclass(frozen=True)
class OpenedKeyStore:
    """The key store and what it holds: every key of ``seq <= watermark``, ``total`` of them.

    ``outcome`` is ``saved`` (restored from the saved summary) or ``scan_<reason>``."""

    store: SummaryKeyStore
    watermark: int
    total: int
    outcome: str
    replayed: int = 0


class _Stale(Exception):
    """The saved summary cannot be used; the message is the fallback's reason."""


def open_key_store(engine: Engine, *, load: int, max_buckets: int, cache_keys: int,
                   rng: random.Random | None = None) -> OpenedKeyStore:
    """The node's key store at start-up (nothing else writes events meanwhile)."""
    try:
        return _restore(engine, load, max_buckets, cache_keys, rng or random.Random())
    except _Stale as why:
        reason = str(why)
    with engine.connect() as conn:
        watermark = max_seq(conn)
    store = open_summary_store(engine, load=load, max_buckets=max_buckets, cache_keys=cache_keys)
    return OpenedKeyStore(store, watermark, len(store), f"scan_{reason}")


def _restore(engine: Engine, load: int, max_buckets: int, cache_keys: int,
             rng: random.Random) -> OpenedKeyStore:
    limit = max_summary_bytes(max_buckets, MAX_KEY_BYTES)
    with engine.connect() as conn:
        row = conn.execute(select(recon_summary.c.watermark, recon_summary.c.watermark_key,
                                  recon_summary.c.total, func.length(recon_summary.c.summary))
                           .where(recon_summary.c.id == 1)).first()
        if row is None:
            raise _Stale("missing")
        watermark, key, total, size = int(row[0]), row[1], int(row[2]), int(row[3])
        if size > limit:
            raise _Stale("too_large")
        blob = conn.execute(select(recon_summary.c.summary)
                            .where(recon_summary.c.id == 1)).scalar_one()
        at = conn.execute(select(events.c.recon_key).where(events.c.seq == watermark)).first()
        if (watermark or key is not None) and (at is None or bytes(at[0]) != key):
            raise _Stale("watermark")
        tail = int(conn.execute(select(func.count()).select_from(events)
                                .where(events.c.seq > watermark)).scalar_one())
    try:
        saved = decode_summary(bytes(blob), max_buckets=max_buckets, max_key_bytes=MAX_KEY_BYTES)
    except RemoteProtocolError as exc:
        log.warning("saved recon summary does not decode: %s", exc)
        raise _Stale("decode") from None
    if saved.total != total:
        raise _Stale("decode")
    # Replaying a key costs twice what scanning one does, plus its read (docs/architecture.md).
    if tail > total // 4:
        raise _Stale("tail")
    summary = BucketSummary.restore(saved.buckets, load=max(load, saved.load),
                                    max_buckets=max_buckets)
    store = SummaryKeyStore(summary, cache_keys=cache_keys)
    reader = SqlKeyReader(engine)
    watermark, replayed = _replay(engine, store, reader, watermark)
    if replayed != tail or not _samples_match(store, reader, rng):
        raise _Stale("sample" if replayed == tail else "tail")
    return OpenedKeyStore(store, watermark, len(store), "saved", replayed)


def _replay(engine: Engine, store: SummaryKeyStore, reader: SqlKeyReader,
            watermark: int) -> tuple[int, int]:
    """Insert the keys above ``watermark``, in seq order; the new watermark and how many."""
    replayed = 0
    while True:
        with engine.connect() as conn:
            rows = conn.execute(select(events.c.seq, events.c.recon_key)
                                .where(events.c.seq > watermark)
                                .order_by(events.c.seq).limit(_TAIL_PAGE)).all()
        if not rows:
            return watermark, replayed
        insert_keys(store, [bytes(k) for _, k in rows], reader)
        watermark = int(rows[-1][0])
        replayed += len(rows)


def _samples_match(store: SummaryKeyStore, reader: SqlKeyReader, rng: random.Random) -> bool:
    """A few buckets (and the last, where new keys go) read back: count and hash sum agree."""
    summary = store.summary
    picks = {len(summary) - 1, *rng.sample(range(len(summary)), min(_SAMPLES, len(summary)))}
    for bucket in sorted(picks):
        count = summary.counts[bucket]
        keys = reader.keys(summary.starts[bucket], summary.end_of(bucket), count + 1)
        if len(keys) != count or sum(map(wide_of, keys)) != summary.wides[bucket]:
            return False
    return True


def log_matches(conn: Connection, *, watermark: int, total: int, since: tuple[int, int]) -> bool:
    """Whether the log holds exactly ``total - since[1]`` rows of ``since[0] < seq <= watermark``:
    ``since`` is the (watermark, total) of the last save or load, checked then, so the summary
    of ``total`` keys then holds exactly the keys of ``seq <= watermark``. A seq range count of
    the rows since, read outside the write transaction (it can take a while after a catch-up,
    and those rows no longer change: deleting events empties the saved summary instead)."""
    old_watermark, old_total = since
    added = conn.execute(select(func.count()).select_from(events)
                         .where(events.c.seq > old_watermark, events.c.seq <= watermark)
                         ).scalar_one()
    return int(added) == total - old_total


def save_summary(conn: Connection, blob: bytes, *, watermark: int, total: int,
                 now_ms: int) -> bool:
    """Write the summary of the keys of ``seq <= watermark`` (``total`` of them, checked with
    :func:`log_matches`), replacing the saved one; False, writing nothing, when the log has no
    event at ``watermark`` (it changed since the check)."""
    key = conn.execute(select(events.c.recon_key).where(events.c.seq == watermark)).scalar()
    if watermark and key is None:
        return False
    conn.execute(delete(recon_summary))
    conn.execute(insert(recon_summary).values(
        id=1, watermark=watermark, watermark_key=None if key is None else bytes(key),
        total=total, summary=blob, saved_at=now_ms))
    return True
