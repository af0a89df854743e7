"""The snapshot written by one plain Python process: the baseline of the Spark job.

Same files as ``spark_jobs.snapshot`` (byte for byte with the same inputs; a test checks it),
built from the same pieces (``BlockEncoder``, the fold, ``finish_block``, the tree), but in one
process that reads the database in (lamport, message_id) order: no JDBC, no shuffles, no
Arrow. ``scripts/bench/spark_bench.py`` divides the job's rate by this one's
(``snapshot_ratio``).

``python -m spark_jobs.plain_snapshot --db URL --out DIR --network-id N --key PEM``
"""

from __future__ import annotations

import argparse
import heapq
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select

from spark_jobs.snapshot import (
    DEFAULT_MAX_EVENTS_PER_FILE,
    EVENT_COLUMNS,
    Build,
    begin_build,
    load_node_key,
    scratch,
)
from spark_jobs.snapshot_tasks import BlockEncoder, finish_block, fold_rows, write_object
from storage import events, make_engine
from storage.snapshot_files import iter_leaf_entries
from sync.recordstream import consensus_time_ns
from sync.snapshot_manifest import TreeEntry, build_buckets, join_buckets

__all__ = ["run_plain"]

_FETCH = 20_000


def _ranked_rows(build: Build, period_ms: int, max_events: int) -> Iterator[tuple[Any, ...]]:
    """The log in consensus order as ``ENCODE_COLUMNS`` rows (rank, period, k and item
    computed on the way: the same numbers ``plan_blocks`` computes in Spark)."""
    cols = [events.c[c] for c in EVENT_COLUMNS]
    stmt = (select(*cols)
            .where(events.c.lamport >= build.lo_ms, events.c.lamport < build.hi_ms)
            .order_by(events.c.lamport, events.c.message_id))
    engine = make_engine(build.url)
    last_lamport, rank, period, index = -1, 0, -1, 0
    try:
        with engine.connect() as conn:
            for seq, key, mid, channel, sender, lamport, wire, received in (
                    conn.execution_options(yield_per=_FETCH).execute(stmt)):
                rank = rank + 1 if lamport == last_lamport else 0
                last_lamport = lamport
                if lamport // period_ms != period:
                    period, index = lamport // period_ms, 0
                k, item = divmod(index, max_events)
                index += 1
                yield (seq, mid, channel, sender, lamport, bytes(wire), received, bytes(key),
                       consensus_time_ns(lamport, rank), rank, period, k, item)
    finally:
        engine.dispose()


def run_plain(
    url: str, out: Path | str, key: Ed25519PrivateKey, network_id: int, *,
    period_ms: int = 60_000, settle_ms: int = 60_000, include_open: bool = False,
    sidecars: bool = True, max_events_per_file: int = DEFAULT_MAX_EVENTS_PER_FILE,
) -> dict[str, Any]:
    """Build or extend the snapshot in ``out`` in this process; the same summary as the job's."""
    build = begin_build(url, out, key, network_id, period_ms=period_ms, settle_ms=settle_ms,
                        include_open=include_open, sidecars=sidecars,
                        max_events_per_file=max_events_per_file)
    if not isinstance(build, Build):
        return build
    base = len(build.manifest.files) - build.first_block
    blocks: list[dict[str, Any]] = []
    written: list[dict[str, Any]] = []
    entries: list[TreeEntry] = []
    running, number = build.start, build.first_block
    with scratch(build):
        encoder = BlockEncoder(build.ctx)

        def close() -> None:
            nonlocal running, number
            keys = encoder.keys
            meta = encoder.close()
            block = {**meta, **next(fold_rows(build.ctx, [(meta["period"], meta["k"])], running,
                                              number))}
            running, number = block["end"], number + 1
            written.append(finish_block(build.ctx, block))
            blocks.append(block)
            entries.extend(TreeEntry(k, base + block["block"], i) for i, k in enumerate(keys))

        for row in _ranked_rows(build, period_ms, max_events_per_file):
            if encoder.block is not None and encoder.group_of(row) != encoder.block:
                close()
            encoder.add(row)
        if encoder.block is not None:
            close()
        new_files = build.sign(blocks, written)
    entries.sort(key=lambda e: e.key)
    manifest = build.manifest
    old = iter_leaf_entries(build.out, manifest.root) if manifest.root else iter(())
    def emit(obj: dict[str, Any]) -> str:
        return write_object(build.out, obj)

    root, ahash = join_buckets(
        build_buckets(heapq.merge(old, entries, key=lambda e: e.key), emit), emit)
    return build.complete(blocks, new_files, root, ahash)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.plain_snapshot",
                                     description="The snapshot job's plain one-process twin.")
    parser.add_argument("--db", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--network-id", type=int, required=True)
    parser.add_argument("--key", required=True, help="Ed25519 private key (PEM) that signs")
    parser.add_argument("--period-ms", type=int, default=60_000)
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--no-sidecars", action="store_true")
    parser.add_argument("--max-events-per-file", type=int, default=DEFAULT_MAX_EVENTS_PER_FILE)
    args = parser.parse_args(argv)
    started = time.monotonic()
    summary = run_plain(args.db, args.out, load_node_key(Path(args.key)), args.network_id,
                        period_ms=args.period_ms, include_open=args.all,
                        sidecars=not args.no_sidecars,
                        max_events_per_file=args.max_events_per_file)
    summary["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
