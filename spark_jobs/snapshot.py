"""``snapshot``: write the log as signed, hash-chained record stream v6 files plus a manifest.

Periods: an event belongs to period ``lamport // period_ms``; its consensus time is
``lamport * 10^6 + rank`` (rank among the events of the same millisecond, ``(lamport,
message_id)`` order). A period's events go into consecutive record files (blocks) of at most
``max_events_per_file`` events each; block numbers count up by one across files and periods.

Executors write, the driver signs (see docs/spark.md, "snapshot"):

1. pass 1 (tasks; the one shuffle of the events sends each period's events to one task, sorted
   in consensus order): number the events as they stream by (rank, index in the period, block,
   item), encode the items, write the sidecar file and scratch copies of the encoded items,
   item hashes and tree entries; return each block's metadata;
2. fold (one task, block order): the running hash over the item hashes: every block's start
   and end hash. The driver receives per-block metadata only;
3. pass 2 (tasks, per block): frame the encoded items with the chain hashes, gzip, write the
   record file, return its file hash; the driver checks the chain, signs (the private key never
   leaves the driver) and writes the signature files;
4. tree (tasks, per bucket of ~32^3 keys): the range tree's nodes up to level 2, from entries
   sorted by key; the driver joins the bucket nodes and writes the few top nodes and the
   manifest.

Incremental: the manifest holds the chain state (next block, running hash, last period written);
a rebuild reads only events of later periods and continues the chain. Only *settled* periods are
written: those that ended ``--settle-ms`` before now, by the wall clock (``--all``: every
period). The clock, not the newest event: a quiet log's last period is written once it settled,
rather than waiting forever for a newer event; and one event stamped far in the future
cannot close periods early (``end_period``). The result says what it left out and until when:
``pending_events`` (in periods not settled yet), ``pending_until_ms`` (the epoch ms after
which a rebuild includes the oldest of them, ``pending_first_events`` of them: those of the
oldest pending event's period) and ``pending_all_until_ms`` (after which it includes them all).
Events that arrive later for an already written period are not in the file chain (counted as
``late``); a node bootstrapped from the snapshot gets them through Recon.

``python -m spark_jobs.snapshot --db URL --out DIR --network-id N --data-dir DIR`` (or ``--key``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from spark_jobs.snapshot_frames import (
    block_plans,
    bucket_nodes,
    encode_periods,
    fold_chain,
    tree_entries,
    tree_sources,
    write_records,
)
from spark_jobs.snapshot_tasks import (
    BUILD_DIR,
    ENCODE_COLUMNS,
    BlockContext,
    local_path,
    summary_of,
    write_atomic,
    write_object,
)
from spark_jobs.source import DEFAULT_DRIVER_MEMORY
from storage import column_bounds, count_from_lamport, lamports_from, make_engine
from storage.snapshot_files import load_manifest, read_object, write_manifest
from sync.identity import peer_id_of
from sync.recon.sha256a import Sha256a
from sync.recordstream import (
    SYNCNODE_FORMAT_VERSION,
    encode_signature_file,
    metadata_hash,
    sidecar_file_name,
    sign_hash,
    signature_file_name,
)
from sync.recordstream import record_stream_pb2 as pb
from sync.recordstream.blocks import SIDECAR_ID
from sync.snapshot_manifest import (
    BUCKET_LEVEL,
    Chain,
    FileEntry,
    Manifest,
    closes_bucket,
    join_buckets,
)

__all__ = ["DEFAULT_MAX_EVENTS_PER_FILE", "NODE_KEY_FILE", "check_chain", "end_period",
           "load_node_key", "main", "run", "sign_block", "signature_file"]

#: The node key's file name under the data directory (``node.p2p.identity.KEY_FILE``; repeated here
#: because a job never imports the node package, a test checks the two agree).
NODE_KEY_FILE = "identity.key"
#: ``[spark] max_events_per_file``: a longer period is split into several record files.
DEFAULT_MAX_EVENTS_PER_FILE = 100_000

#: Tree entries one task turns into rows at most (one Arrow batch: ~60 bytes each).
_ENTRIES_PER_TASK = 200_000


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


def load_node_key(path: Path) -> Ed25519PrivateKey:
    key = load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 key")
    return key


def signature_file(key: Ed25519PrivateKey, record_hash: bytes, start: bytes, end: bytes,
                   block: int) -> bytes:
    major, minor, patch = SYNCNODE_FORMAT_VERSION
    hapi = pb.SemanticVersion(major=major, minor=minor, patch=patch)
    sig = pb.SignatureFile(
        file_signature=sign_hash(key, record_hash),
        metadata_signature=sign_hash(key, metadata_hash(hapi, start, end, block)),
    )
    return encode_signature_file(sig)


def sign_block(out: Path, key: Ed25519PrivateKey, ctx: BlockContext, block: dict[str, Any],
               path: str, record_hash: bytes) -> FileEntry:
    """Sign a written record file (here, on the driver) and describe it for the manifest."""
    directory, name = path.rsplit("/", 1)
    sig_path = f"{directory}/{signature_file_name(name)}"
    write_atomic(out / sig_path, signature_file(key, record_hash, block["start"], block["end"],
                                                block["block"]))
    sidecars = ((f"{directory}/sidecar/{sidecar_file_name(name, SIDECAR_ID)}",)
                if block["sidecar_hash"] is not None else ())
    return FileEntry(
        path=path, block=block["block"], period=block["period"], count=block["count"],
        first_consensus_ns=block["first_ns"], start_running_hash=block["start"].hex(),
        end_running_hash=block["end"].hex(), file_hash=record_hash.hex(), signature=sig_path,
        sidecars=sidecars)


def check_chain(blocks: list[dict[str, Any]], start: bytes, first_block: int) -> None:
    """The blocks (in order) continue the chain: numbers, start = previous end."""
    running, number = start, first_block
    for block in blocks:
        if block["block"] != number or block["start"] != running:
            raise RuntimeError(f"block {block['block']} (period {block['period']}) does not "
                               "continue the chain")
        running, number = block["end"], number + 1


def _lamport_range(url: str) -> tuple[int, int, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return column_bounds(conn, "lamport")
    finally:
        engine.dispose()


def old_units(out: Path, root: str) -> list[tuple[str, bytes, int]]:
    """(cid, last key, count) of the previous tree's bucket nodes (or of its root when
    smaller)."""
    obj = read_object(out, root)
    level = int(obj.get("level", 0))
    if level == 0:
        keys = obj.get("keys") or []
        return [(root, bytes.fromhex(keys[-1]["key"]), len(keys))] if keys else []
    if level < BUCKET_LEVEL:
        children = obj["children"]
        return [(root, bytes.fromhex(children[-1]["last"]), sum(c["count"] for c in children))]
    if level == BUCKET_LEVEL:
        return [(c["cid"], bytes.fromhex(c["last"]), int(c["count"])) for c in obj["children"]]
    return [unit for c in obj["children"] for unit in old_units(out, c["cid"])]


def source_groups(sources: list[tuple[int, str, int]], limit: int) -> list[list[tuple[int, str]]]:
    """Consecutive sources (file, path, entries) in groups of at most ``limit`` entries (or
    one source): one group per task, so no Arrow batch of entries grows with the log."""
    groups: list[list[tuple[int, str]]] = []
    size = limit
    for file, path, count in sources:
        if size + count > limit:
            groups.append([])
            size = 0
        groups[-1].append((file, path))
        size += count
    return groups


def build_tree_from(spark: Any, ctx: BlockContext, manifest: Manifest,
                    blocks: list[dict[str, Any]], partitions: int) -> tuple[str, Sha256a]:
    """The range tree over the previous tree's entries and the new blocks' (tasks build and
    write the buckets' nodes; the driver joins the bucket summaries)."""
    out = Path(ctx.out)
    units = old_units(out, manifest.root) if manifest.root else []
    bounds = sorted({b for block in blocks for b in block["bounds"]}
                    | {last for _cid, last, _n in units if closes_bucket(last)})
    base = len(manifest.files) - manifest.chain.next_block
    sources = [(base + b["block"], str(ctx.scratch(b["period"], b["k"], "keys")), b["count"])
               for b in blocks] + [(-1, f"cid:{cid}", n) for cid, _last, n in units]
    bcast = spark.sparkContext.broadcast(bounds)
    try:
        entries = tree_entries(tree_sources(spark, source_groups(sources, _ENTRIES_PER_TASK)),
                               ctx, bcast)
        rows = bucket_nodes(entries, ctx, partitions).collect()
    finally:
        bcast.unpersist()
    summaries = [summary_of(r) for r in sorted(rows, key=lambda r: int(r["bucket"]))]
    return join_buckets(summaries, lambda obj: write_object(out, obj))


@dataclass(frozen=True)
class Build:
    """One build of a snapshot: where the chain stands and which periods it writes."""

    out: Path
    url: str
    key: Ed25519PrivateKey
    manifest: Manifest
    ctx: BlockContext
    lo_ms: int
    hi_ms: int
    end_period: int
    total: int
    period_ms: int
    settle_ms: int

    @property
    def start(self) -> bytes:
        return bytes.fromhex(self.manifest.chain.running_hash)

    @property
    def first_block(self) -> int:
        return self.manifest.chain.next_block

    def sign(self, blocks: list[dict[str, Any]], written: list[dict[str, Any]]
             ) -> list[FileEntry]:
        """Check the chain and that every block was written once; sign each file."""
        check_chain(blocks, self.start, self.first_block)
        files = {w["block"]: (w["path"], w["file_hash"]) for w in written}
        if sorted(files) != [b["block"] for b in blocks] or len(written) != len(blocks):
            raise RuntimeError("pass 2 did not write every block exactly once")
        return [sign_block(self.out, self.key, self.ctx, b, *files[b["block"]]) for b in blocks]

    def complete(self, blocks: list[dict[str, Any]], new_files: list[FileEntry], root: str,
                 ahash: Sha256a) -> dict[str, Any]:
        """Write the manifest (atomically: the only object ever replaced); the job summary."""
        manifest = self.manifest
        n_events = sum(int(b["count"]) for b in blocks)
        late = max(0, self.total - n_events - manifest.count - _count_after(self.url, self.hi_ms))
        last_period = max(b["period"] for b in blocks) if blocks else manifest.chain.last_period
        running = blocks[-1]["end"] if blocks else self.start
        next_block = self.first_block + len(blocks)
        updated = replace(
            manifest,
            chain=Chain(next_block=next_block, running_hash=running.hex(),
                        last_period=max(last_period, self.end_period - 1)),
            files=manifest.files + tuple(new_files), root=root, count=ahash.count,
            ahash=ahash.hex(),
        )
        # Tasks write without fsync (as Hadoop's committers do); everything they wrote must be
        # on disk before the manifest that points at it is.
        os.sync()
        write_manifest(self.out, updated)
        return {"job": "snapshot", "node": manifest.node, "out": str(self.out),
                "events": updated.count, "files": len(updated.files),
                "new_files": len(new_files), "new_events": n_events, "late": late,
                "running_hash": running.hex(), "next_block": next_block, "root": root,
                "settle_ms": self.settle_ms, "period_ms": self.period_ms,
                **_pending(self.url, self.end_period, self.period_ms, self.settle_ms)}


# The phases a build reports (``step`` of ``steps`` in its progress lines): plan, start Spark,
# encode, write, tree, manifest.
STEPS = 6


def begin_build(url: str, out: Path | str, key: Ed25519PrivateKey, network_id: int, *,
                period_ms: int, settle_ms: int, include_open: bool, sidecars: bool,
                max_events_per_file: int, now_ms: int | None = None) -> Build | dict[str, Any]:
    """The build to do, or the summary when there is nothing to write."""
    if period_ms <= 0 or max_events_per_file <= 0:
        raise ValueError("period_ms and max_events_per_file must be positive")
    out = local_path(out)
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
    # Nothing settled to write, also when the periods to write hold no event at all (a first
    # build while every event is still in the settle window): no chain step, no Spark.
    if total == 0 or end <= first_period or _count_after(url, first_period * period_ms) == \
            _count_after(url, end * period_ms):
        return {"job": "snapshot", "node": node, "new_files": 0, "new_events": 0,
                "out": str(out), "events": manifest.count, "files": len(manifest.files),
                "late": 0, "settle_ms": settle_ms, "period_ms": period_ms,
                **_pending(url, max(end, first_period), period_ms, settle_ms)}
    build = out / BUILD_DIR / str(manifest.chain.next_block)
    ctx = BlockContext(str(out), str(build), node, sidecars, period_ms, max_events_per_file)
    return Build(out, url, key, manifest, ctx, first_period * period_ms, end * period_ms, end,
                 total, period_ms, settle_ms)


@contextlib.contextmanager
def scratch(build: Build) -> Iterator[None]:
    """The build's scratch directory, removed afterwards (and first, after a crashed run)."""
    path = Path(build.ctx.build)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()


def run(
    spark: Any, url: str, out: Path | str, key: Ed25519PrivateKey, network_id: int, *,
    period_ms: int = 60_000, settle_ms: int = 60_000, include_open: bool = False,
    partitions: int = 8, sidecars: bool = True,
    max_events_per_file: int = DEFAULT_MAX_EVENTS_PER_FILE, now_ms: int | None = None,
    planned: Build | dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build or extend the snapshot in ``out``; returns the job's summary.

    ``now_ms`` (epoch ms, default the wall clock) decides which periods have settled;
    ``planned`` is ``begin_build``'s answer when the caller asked it already.
    """
    from spark_jobs.source import emit_progress, read_events, stage_progress

    build = planned if planned is not None else begin_build(
        url, out, key, network_id, period_ms=period_ms, settle_ms=settle_ms,
        include_open=include_open, sidecars=sidecars, max_events_per_file=max_events_per_file,
        now_ms=now_ms)
    if not isinstance(build, Build):
        return build
    ctx = build.ctx
    clock = [time.monotonic()]
    phases: dict[str, float] = {}

    def lap(name: str) -> None:
        clock.append(time.monotonic())
        phases[name] = round(clock[-1] - clock[-2], 3)

    with scratch(build):
        df = read_events(spark, url, ENCODE_COLUMNS, partitions=partitions,
                         where=f"lamport >= {build.lo_ms} AND lamport < {build.hi_ms}")
        with stage_progress(spark, "snapshot:encode", step=3, steps=STEPS):
            folded = fold_chain(encode_periods(df, ctx, partitions), ctx, build.start,
                                build.first_block)
            blocks = sorted((r.asDict() for r in folded.collect()), key=lambda b: b["block"])
        lap("read_encode_fold")
        emit_progress("snapshot:encode", len(blocks), len(blocks), step=3, steps=STEPS)
        with stage_progress(spark, "snapshot:write", step=4, steps=STEPS):
            written = [{**r.asDict(), "file_hash": bytes(r["file_hash"])} for r in
                       write_records(block_plans(spark, blocks, partitions), ctx).collect()]
        lap("write_files")
        new_files = build.sign(blocks, written)
        lap("sign")
        emit_progress("snapshot:write", len(new_files), len(new_files), step=4, steps=STEPS)
        with stage_progress(spark, "snapshot:tree", step=5, steps=STEPS):
            root, ahash = build_tree_from(spark, ctx, build.manifest, blocks, partitions)
        lap("tree")
    emit_progress("snapshot:manifest", 0, 1, step=6, steps=STEPS)
    summary = build.complete(blocks, new_files, root, ahash)
    lap("manifest")
    return {**summary, "phases": phases}


def _pending(url: str, first_open: int, period_ms: int, settle_ms: int) -> dict[str, Any]:
    """What this build left out: events of periods from ``first_open`` on (not settled yet),
    and when they settle, from their own periods (period ``p`` is written by a build at
    ``(p + 1) * period_ms + settle_ms`` or later: ``end_period``): ``pending_until_ms`` the
    oldest pending event's, with ``pending_first_events`` the events a rebuild after it
    includes; ``pending_all_until_ms`` the newest's, after which a rebuild includes them all."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            oldest, newest, pending = lamports_from(conn, first_open * period_ms)
            first = oldest // period_ms + 1
            settles_first = pending - count_from_lamport(conn, first * period_ms)
    finally:
        engine.dispose()
    if not pending:
        return {"pending_events": 0, "pending_reason": None, "pending_until_ms": None,
                "pending_first_events": 0, "pending_all_until_ms": None}
    return {"pending_events": pending,
            "pending_reason": f"in periods that ended less than settle_ms={settle_ms} ago or "
                              "are still open (late arrivals may still come)",
            "pending_until_ms": first * period_ms + settle_ms,
            "pending_first_events": settles_first,
            "pending_all_until_ms": (newest // period_ms + 1) * period_ms + settle_ms}


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
    parser.add_argument("--out", required=True,
                        help="snapshot directory (local or shared POSIX path, or file://)")
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
    parser.add_argument("--max-events-per-file", type=int, default=DEFAULT_MAX_EVENTS_PER_FILE,
                        help="split a longer period into several record files")
    parser.add_argument("--no-sidecars", action="store_true",
                        help="no SYNCNODE_DELIVERY sidecars (files identical across nodes)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from spark_jobs.source import RESULT_PREFIX, build_session, emit_progress

    args = parse_args(argv)
    key_path = Path(args.key) if args.key else Path(args.data_dir) / NODE_KEY_FILE
    key = load_node_key(key_path)
    started = time.monotonic()
    # What to write is known from the manifest and the database alone: with nothing settled
    # to add, answer without starting Spark (its JVM costs ~10 s; issue 29).
    emit_progress("snapshot:plan", 0, 1, step=1, steps=STEPS)
    planned = begin_build(args.db, args.out, key, args.network_id, period_ms=args.period_ms,
                          settle_ms=args.settle_ms, include_open=args.all,
                          sidecars=not args.no_sidecars,
                          max_events_per_file=args.max_events_per_file)
    if isinstance(planned, Build):
        emit_progress("snapshot:start-spark", 0, 1, step=2, steps=STEPS)
        spark = build_session(args.master, "syncnode-snapshot",
                              shuffle_partitions=args.partitions,
                              extra={"spark.driver.memory": args.driver_memory})
        try:
            run_started = time.monotonic()
            summary = run(spark, args.db, args.out, key, args.network_id,
                          period_ms=args.period_ms, settle_ms=args.settle_ms,
                          include_open=args.all, partitions=args.partitions,
                          sidecars=not args.no_sidecars,
                          max_events_per_file=args.max_events_per_file, planned=planned)
            # The build alone, without starting the session (what the benchmark divides by).
            summary["run_seconds"] = round(time.monotonic() - run_started, 3)
        finally:
            spark.stop()
    else:
        summary = {**planned, "run_seconds": 0.0, "spark": False}
    summary["seconds"] = round(time.monotonic() - started, 3)
    emit_progress("snapshot:done", 1, 1, step=STEPS, steps=STEPS)
    print(RESULT_PREFIX + json.dumps(summary, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    # Run the imported module, not __main__: Spark pickles functions by module reference.
    from spark_jobs import snapshot as _job

    raise SystemExit(_job.main())
