"""``snapshot``: write the log as signed, hash-chained record stream v6 files plus a manifest.

Periods: an event belongs to period ``lamport // period_ms``; its consensus time is
``lamport * 10^6 + rank`` (rank among the events of the same millisecond, ``(lamport,
message_id)`` order: ``row_number() over (partition by lamport order by message_id) - 1``). One
record file per non-empty period, in period order, block numbers counting up by one.

Two passes over the ranked events, both parallel:

1. each event's item hash (``event_item`` + ``item_hash``) in the workers; the driver folds the
   running hash over them in consensus order (48-byte inputs, the only sequential step) and so
   learns every period's start running hash;
2. each period's block assembled in the workers with ``assemble_block`` from its start hash
   (record file + SYNCNODE_DELIVERY sidecar); the driver checks that the block's end hash is the
   one the fold found, signs the file and metadata hashes with the node key (the private key
   never leaves the driver process) and writes the files.

Incremental: the manifest holds the chain state (next block, running hash, last period written);
a rebuild reads only events of later periods and continues the chain. Only *settled* periods are
written: those that ended ``--settle-ms`` before now, by the wall clock (``--all``: every
period). The clock, not the newest event: a quiet log's last period is written once it settled,
rather than waiting forever for a newer event; and one event stamped far in the future
cannot close periods early (``end_period``). The result says what it left out and until when:
``pending_events`` (in periods not settled yet) and ``pending_until_ms`` (the epoch ms after
which a rebuild includes the oldest of them). Events that arrive later for an already written
period are not in the file chain (counted as ``late``); a node bootstrapped from the snapshot
gets them through Recon.

``python -m spark_jobs.snapshot --db URL --out DIR --network-id N --data-dir DIR`` (or ``--key``).
"""

from __future__ import annotations

import argparse
import heapq
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from spark_jobs.manifest import iter_leaf_entries, load_manifest, write_manifest, write_objects
from spark_jobs.source import DEFAULT_DRIVER_MEMORY
from storage import column_bounds, count_from_lamport, make_engine
from sync.identity import peer_id_of
from sync.recordstream import (
    MAX_RANK,
    SYNCNODE_FORMAT_VERSION,
    BlockItem,
    SnapshotEvent,
    assemble_block,
    delivery_sidecar_record,
    encode_signature_file,
    event_item,
    file_hash,
    fold_running_hash,
    gunzip_limited,
    item_hash,
    metadata_hash,
    sign_hash,
    signature_file_name,
)
from sync.recordstream import record_stream_pb2 as pb
from sync.snapshot_manifest import Chain, FileEntry, Manifest, TreeEntry, build_tree

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["NODE_KEY_FILE", "assemble_period", "end_period", "item_hashes", "load_node_key",
           "main", "rank_events", "run"]

#: The node key's file name under the data directory (``node.identity.KEY_FILE``; repeated here
#: because a job never imports the node package, a test checks the two agree).
NODE_KEY_FILE = "identity.key"

EVENT_COLUMNS = ("seq", "recon_key", "message_id", "channel", "sender", "lamport", "wire",
                 "received_at")
_NS_PER_MS = 1_000_000


def rank_events(df: DataFrame, period_ms: int) -> DataFrame:
    """Add ``consensus_ns`` and ``period`` to events (``EVENT_COLUMNS``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank = F.row_number().over(Window.partitionBy("lamport").orderBy("message_id")) - 1
    return (
        df.withColumn("rank", rank)
        .withColumn("consensus_ns", F.col("lamport") * F.lit(_NS_PER_MS) + F.col("rank"))
        .withColumn("period", F.floor(F.col("lamport") / F.lit(period_ms)).cast("long"))
    )


def _event(row: Any) -> SnapshotEvent:
    return SnapshotEvent(int(row["seq"]), row["message_id"], row["channel"], row["sender"],
                         int(row["lamport"]), bytes(row["wire"]), int(row["received_at"]))


def item_hashes(rows: Iterable[Any]) -> Iterator[tuple[int, int, bytes]]:
    """(consensus_ns, period, item hash) of ranked events: the parallel half of the chain."""
    for row in rows:
        if row["rank"] >= MAX_RANK:
            raise ValueError(f"more than {MAX_RANK} events at lamport {row['lamport']}")
        record, transaction = event_item(_event(row), int(row["consensus_ns"]))
        yield int(row["consensus_ns"]), int(row["period"]), item_hash(record, transaction)


def assemble_period(
    node: str, period: int, rows: Iterable[Any], start: bytes, block: int, sidecars: bool
) -> dict[str, Any]:
    """One period's files (unsigned) with what the driver needs to check and sign them."""
    ranked = sorted(rows, key=lambda r: int(r["consensus_ns"]))
    items = []
    for row in ranked:
        event, consensus = _event(row), int(row["consensus_ns"])
        record, transaction = event_item(event, consensus)
        extra = (delivery_sidecar_record(event, consensus),) if sidecars else ()
        items.append(BlockItem(consensus, record, transaction, extra))
    outputs, end = assemble_block(node, items, start, block)
    raw = gunzip_limited(outputs[0].data, outputs[0].path)
    return {
        "period": period, "block": block, "start": start, "end": end,
        "files": [(o.path, o.data) for o in outputs], "file_hash": file_hash(raw),
        "first_ns": items[0].consensus_ns, "count": len(items),
        "keys": [bytes(r["recon_key"]) for r in ranked],
    }


def load_node_key(path: Path) -> Ed25519PrivateKey:
    key = load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 key")
    return key


def _signature_file(key: Ed25519PrivateKey, record_hash: bytes, start: bytes, end: bytes,
                    block: int) -> bytes:
    major, minor, patch = SYNCNODE_FORMAT_VERSION
    hapi = pb.SemanticVersion(major=major, minor=minor, patch=patch)
    sig = pb.SignatureFile(
        file_signature=sign_hash(key, record_hash),
        metadata_signature=sign_hash(key, metadata_hash(hapi, start, end, block)),
    )
    return encode_signature_file(sig)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _lamport_range(url: str) -> tuple[int, int, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return column_bounds(conn, "lamport")
    finally:
        engine.dispose()


def end_period(newest_ms: int, now_ms: int, period_ms: int, settle_ms: int,
               include_open: bool = False) -> int:
    """The first period not written: periods that ended ``settle_ms`` before the job's clock.

    The clock alone decides. Not the newest event: counted from it, a quiet log never had its
    last period written (nothing newer comes to close it); and one event stamped in the future
    (the clock rule lets one run up to ``sds.max_lamport_ahead_ms`` ahead) would close every
    period up to it, so honest events arriving later for them would be left out as late for
    good. ``include_open`` (``--all``) writes every period up to the newest event."""
    if include_open:
        return newest_ms // period_ms + 1
    return (now_ms - settle_ms) // period_ms


def run(
    spark: Any, url: str, out: Path, key: Ed25519PrivateKey, network_id: int, *,
    period_ms: int = 60_000, settle_ms: int = 60_000, include_open: bool = False,
    partitions: int = 8, sidecars: bool = True, now_ms: int | None = None,
) -> dict[str, Any]:
    """Build or extend the snapshot in ``out``; returns the job's summary.

    ``now_ms`` (epoch ms, default the wall clock) decides which periods have settled.
    """
    from spark_jobs.source import emit_progress, read_events, stage_progress

    if period_ms <= 0:
        raise ValueError("period_ms must be positive")
    node = peer_id_of(key)
    prev = load_manifest(out)
    if prev is not None and (prev.node, prev.network_id, prev.period_ms) != (
            node, network_id, period_ms):
        raise ValueError(f"{out} holds a snapshot of node {prev.node}, network "
                         f"{prev.network_id}, period {prev.period_ms} ms: not continuable")
    manifest = prev or Manifest(network_id=network_id, node=node, period_ms=period_ms)
    first_period = manifest.chain.last_period + 1
    _lo, newest, total = _lamport_range(url)
    clock_ms = int(time.time() * 1000) if now_ms is None else now_ms
    end = end_period(newest, clock_ms, period_ms, settle_ms, include_open)
    summary: dict[str, Any] = {"job": "snapshot", "node": node, "new_files": 0,
                               "new_events": 0, "out": str(out), "settle_ms": settle_ms,
                               "period_ms": period_ms}
    if total == 0 or end <= first_period:
        summary.update(events=manifest.count, files=len(manifest.files), late=0,
                       **_pending(url, max(end, first_period), period_ms, settle_ms))
        return summary
    lo_ms, hi_ms = first_period * period_ms, end * period_ms
    df = read_events(spark, url, EVENT_COLUMNS, partitions=partitions,
                     where=f"lamport >= {lo_ms} AND lamport < {hi_ms}")
    ranked = rank_events(df, period_ms).persist()
    try:
        # Pass 1: item hashes in parallel, the running hash folded here in consensus order.
        with stage_progress(spark, "snapshot:hash"):
            hashed = spark.createDataFrame(
                ranked.rdd.mapPartitions(item_hashes), "consensus_ns long, period long, h binary"
            ).orderBy("consensus_ns")
            running = bytes.fromhex(manifest.chain.running_hash)
            block = manifest.chain.next_block
            starts: dict[int, tuple[bytes, int]] = {}
            ends: dict[int, bytes] = {}
            n_events = 0
            for row in hashed.toLocalIterator():
                period = int(row["period"])
                if period not in starts:
                    starts[period] = (running, block)
                    block += 1
                running = fold_running_hash(running, bytes(row["h"]))
                ends[period] = running
                n_events += 1
        emit_progress("snapshot:hash", n_events, n_events)
        # Pass 2: blocks in parallel, checked, signed and written here.
        bcast = spark.sparkContext.broadcast(starts)

        def build(pair: tuple[int, Iterable[Any]]) -> dict[str, Any]:
            start, blk = bcast.value[pair[0]]
            return assemble_period(node, pair[0], pair[1], start, blk, sidecars)

        blocks = ranked.rdd.keyBy(lambda r: int(r["period"])).groupByKey(
            max(1, min(partitions, len(starts)))).map(build)
        new_files: list[FileEntry] = []
        new_entries: list[TreeEntry] = []
        base = len(manifest.files)
        with stage_progress(spark, "snapshot:write"):
            for done, result in enumerate(blocks.toLocalIterator(), start=1):
                period = result["period"]
                if result["end"] != ends[period] or result["start"] != starts[period][0]:
                    raise RuntimeError(f"period {period}: block hash differs from the fold")
                paths = [p for p, _ in result["files"]]
                for path, data in result["files"]:
                    _write(out / path, data)
                sig_path = paths[0].rsplit("/", 1)[0] + "/" + signature_file_name(
                    paths[0].rsplit("/", 1)[1])
                _write(out / sig_path, _signature_file(key, result["file_hash"], result["start"],
                                                       result["end"], result["block"]))
                # Blocks arrive in any order; a file's index in the manifest follows its block.
                index = base + result["block"] - manifest.chain.next_block
                new_files.append(FileEntry(
                    path=paths[0], block=result["block"], period=period, count=result["count"],
                    first_consensus_ns=result["first_ns"], start_running_hash=result["start"].hex(),
                    end_running_hash=result["end"].hex(), file_hash=result["file_hash"].hex(),
                    signature=sig_path, sidecars=tuple(paths[1:]),
                ))
                new_entries.extend(TreeEntry(k, index, i) for i, k in enumerate(result["keys"]))
                emit_progress("snapshot:write", done, len(starts))
        bcast.unpersist()
    finally:
        ranked.unpersist()
    late = max(0, total - n_events - manifest.count - _count_after(url, hi_ms))
    new_files.sort(key=lambda f: f.block)
    new_entries.sort(key=lambda e: e.key)
    old = iter_leaf_entries(out, manifest.root) if manifest.root else iter(())
    root, objects, ahash = build_tree(heapq.merge(old, new_entries, key=lambda e: e.key))
    write_objects(out, objects)
    last_period = max(starts) if starts else manifest.chain.last_period
    updated = replace(
        manifest,
        chain=Chain(next_block=block, running_hash=running.hex(),
                    last_period=max(last_period, end - 1)),
        files=manifest.files + tuple(new_files), root=root, count=ahash.count, ahash=ahash.hex(),
    )
    write_manifest(out, updated)
    summary.update(events=updated.count, files=len(updated.files), new_files=len(new_files),
                   new_events=n_events, late=late, running_hash=running.hex(),
                   next_block=block, root=root, **_pending(url, end, period_ms, settle_ms))
    return summary


def _pending(url: str, first_open: int, period_ms: int, settle_ms: int) -> dict[str, Any]:
    """What this build left out: events of periods from ``first_open`` on (not settled yet),
    and when the oldest of them settles (a rebuild after that includes them)."""
    pending = _count_after(url, first_open * period_ms)
    return {"pending_events": pending,
            "pending_reason": f"in periods that ended less than settle_ms={settle_ms} ago or "
                              "are still open (late arrivals may still come)" if pending else None,
            "pending_until_ms": (first_open + 1) * period_ms + settle_ms if pending else None}


def _count_after(url: str, lamport_ms: int) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return count_from_lamport(conn, lamport_ms)
    finally:
        engine.dispose()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.snapshot",
                                     description="Write or extend a record stream snapshot.")
    parser.add_argument("--db", required=True, help="node database (SQLAlchemy URL)")
    parser.add_argument("--out", required=True, help="snapshot directory")
    parser.add_argument("--network-id", type=int, required=True)
    keys = parser.add_mutually_exclusive_group(required=True)
    keys.add_argument("--data-dir", help="node data directory (its identity.key signs)")
    keys.add_argument("--key", help="Ed25519 private key (PEM) that signs")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--driver-memory", default=DEFAULT_DRIVER_MEMORY,
                        help=f"spark.driver.memory (default {DEFAULT_DRIVER_MEMORY})")
    parser.add_argument("--period-ms", type=int, default=60_000, help="record file period")
    parser.add_argument("--settle-ms", type=int, default=60_000,
                        help="write periods that ended this long ago (wall clock)")
    parser.add_argument("--all", action="store_true",
                        help="also write the newest, still open period (it is then final)")
    parser.add_argument("--no-sidecars", action="store_true",
                        help="no SYNCNODE_DELIVERY sidecars (files identical across nodes)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from spark_jobs.source import RESULT_PREFIX, build_session, emit_progress

    args = parse_args(argv)
    key_path = Path(args.key) if args.key else Path(args.data_dir) / NODE_KEY_FILE
    key = load_node_key(key_path)
    started = time.monotonic()
    spark = build_session(args.master, "syncnode-snapshot", shuffle_partitions=args.partitions,
                          extra={"spark.driver.memory": args.driver_memory})
    try:
        emit_progress("snapshot", 0, 1)
        summary = run(spark, args.db, Path(args.out), key, args.network_id,
                      period_ms=args.period_ms, settle_ms=args.settle_ms,
                      include_open=args.all, partitions=args.partitions,
                      sidecars=not args.no_sidecars)
    finally:
        spark.stop()
    summary["seconds"] = round(time.monotonic() - started, 3)
    emit_progress("snapshot", 1, 1)
    print(RESULT_PREFIX + json.dumps(summary, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    # Run the imported module, not __main__: Spark pickles functions by module reference.
    from spark_jobs import snapshot as _job

    raise SystemExit(_job.main())
