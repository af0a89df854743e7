"""Build node databases full of real signed SDS events, for tests and benchmarks.

Events are made the way a node makes its own: ``encode_event`` (what ``SdsChannel.send`` uses)
signs them and ``sync.stored_event.record_of_event`` (the node's write path)
turns them into storage rows with their Recon keys. Signing dominates the cost, so time windows
of the log are generated in worker processes and bulk-inserted; the result can be cached as a
SQLite file and copied.

``python -m spark_jobs.testlog OUT.db --events N`` writes such a database.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from storage import EventRecord, event_row, insert_rows, make_engine, upgrade
from sync.identity import peer_id_of
from sync.sds import HistoryRef, encode_event
from sync.stored_event import record_of_event

__all__ = ["LogSpec", "build_log", "cached_log", "cached_log_path", "iter_rows", "make_records",
           "test_key"]

BASE_TIME_S = 1_700_000_000.0
_INSERT_BATCH = 5_000


@dataclass(frozen=True)
class LogSpec:
    """What to generate: ``events`` spread round-robin over ``keys`` x ``channels`` streams.

    Stream ``s`` sends its ``j``-th event at ``start_s + j * step_s * streams + s * step_s``, so
    the whole log has one event per ``step_s`` seconds in time order (Lamport = that time in ms).
    """

    events: int
    keys: int = 4
    channels: tuple[str, ...] = ("general", "blocks")
    network_id: int = 1
    start_s: float = BASE_TIME_S
    step_s: float = 0.01
    content_bytes: int = 64
    seed: str = "syncnode-testlog"

    @property
    def streams(self) -> int:
        return self.keys * len(self.channels)


def test_key(seed: str, index: int) -> Ed25519PrivateKey:
    """A deterministic Ed25519 key (test data only)."""
    return Ed25519PrivateKey.from_private_bytes(
        hashlib.sha256(f"{seed}/key/{index}".encode()).digest()
    )


def _window_rows(spec: LogSpec, first: int, count: int) -> list[dict[str, object]]:
    """Storage rows of events ``first .. first+count-1`` of every stream.

    ``encode_event`` is what ``SdsChannel.send`` signs with; the channel's other bookkeeping
    (bloom filter, buffers) adds nothing to the stored event, so it is skipped for speed. Each
    event's causal history is its stream's previous events, as ``send`` would choose them.
    """
    rows: list[dict[str, object]] = []
    pad = b"x" * spec.content_bytes
    for stream in range(spec.streams):
        key = test_key(spec.seed, stream % spec.keys)
        channel = spec.channels[stream // spec.keys]
        sender = peer_id_of(key)
        history: list[HistoryRef] = []
        for j in range(first, first + count):
            lamport = round((spec.start_s + (j * spec.streams + stream) * spec.step_s) * 1000)
            content = (f"{spec.seed} {channel} {stream} #{j} ".encode() + pad)[: spec.content_bytes]
            ev = encode_event(channel, sender, lamport, tuple(history[-2:]), content, key)
            history = [*history[-1:], HistoryRef(ev.message_id)]
            record = record_of_event(spec.network_id, ev)
            rows.append(event_row(record, received_at=lamport))
    return rows


def _work(args: tuple[LogSpec, int, int]) -> list[dict[str, object]]:
    return _window_rows(*args)


def iter_rows(
    spec: LogSpec, *, offset: int = 0, processes: int | None = None, window: int = 2_000
) -> Iterator[list[dict[str, object]]]:
    """Batches of storage rows for events [offset, offset + spec.events), roughly in time order.

    ``offset`` and ``spec.events`` count events per stream times ``spec.streams``.
    """
    per_stream_first = offset // spec.streams
    per_stream = spec.events // spec.streams
    tasks = [
        (spec, per_stream_first + w, min(window, per_stream - w))
        for w in range(0, per_stream, window)
    ]
    procs = processes if processes is not None else min(os.cpu_count() or 1, len(tasks))
    if procs <= 1:
        yield from map(_work, tasks)
        return
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        yield from pool.imap(_work, tasks)


def make_records(spec: LogSpec, *, offset: int = 0) -> list[EventRecord]:
    """The events as ``EventRecord``s (what the node's write path takes)."""
    cols = ("recon_key", "message_id", "channel", "sender", "lamport", "wire")
    return [
        EventRecord(*(row[c] for c in cols))  # type: ignore[arg-type]
        for batch in iter_rows(spec, offset=offset, processes=1)
        for row in batch
    ]


def build_log(url: str, spec: LogSpec, *, offset: int = 0, processes: int | None = None) -> int:
    """Generate and bulk-insert the events numbered from ``offset`` into the database."""
    engine = make_engine(url, sqlite_synchronous="NORMAL")
    n = 0
    try:
        upgrade(engine)
        for batch in iter_rows(spec, offset=offset, processes=processes):
            with engine.begin() as conn:
                insert_rows(conn, batch)
            n += len(batch)
    finally:
        engine.dispose()
    return n


def cached_log(path: Path, spec: LogSpec, cache_dir: Path) -> Path:
    """Copy a cached SQLite log for ``spec`` to ``path``, generating the cache file once."""
    shutil.copyfile(cached_log_path(spec, cache_dir), path)
    return path


def cached_log_path(spec: LogSpec, cache_dir: Path) -> Path:
    """The cached SQLite log for ``spec`` (generated on first use); treat it as read-only."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha256(repr(spec).encode()).hexdigest()[:16]
    cached = cache_dir / f"testlog-{spec.events}-{tag}.db"
    if not cached.exists():
        tmp = cached.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        build_log(f"sqlite:///{tmp}", spec)
        engine = make_engine(f"sqlite:///{tmp}")
        with engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        engine.dispose()
        tmp.rename(cached)
    return cached


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.testlog")
    parser.add_argument("out", help="SQLite file to create or extend")
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--offset", type=int, default=0, help="first event number")
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--network-id", type=int, default=1)
    args = parser.parse_args(argv)
    spec = LogSpec(events=args.events, keys=args.keys, network_id=args.network_id)
    n = build_log(f"sqlite:///{Path(args.out).resolve()}", spec, offset=args.offset)
    print(f"wrote {n} events to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
