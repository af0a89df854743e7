"""What the snapshot's tasks do: encode blocks, fold the chain, frame files, build the tree.

Every function here runs where the data is (a Spark task, or the plain writer's one process)
and writes its output straight to the snapshot directory; it returns only per-file or per-bucket
metadata. The snapshot directory is a POSIX path every executor can reach (a local directory on
one machine, a shared mount on a cluster); ``file://`` URLs are accepted.

Scratch space: ``<out>/.build/<first block>/`` holds each block's encoded items
(``<period>-<k>.items``) and tree entries (``<period>-<k>.keys``, Arrow IPC) between the
passes; the driver removes it when the build is done. Files are written to a temporary name
and renamed, so a retried or speculative task never leaves a half-written file behind.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from storage.snapshot_files import iter_leaf_entries
from sync.recordstream import (
    consensus_time_ns,
    gzip_deterministic,
    record_file_name,
    sha384,
    sidecar_file_name,
)
from sync.recordstream.blocks import SIDECAR_ID, BlockBody, fold_item_hashes, frame_record_file
from sync.snapshot_manifest import (
    BUCKET_LEVEL,
    Summary,
    TreeEntry,
    build_buckets,
    closes_bucket,
    encode_node,
    object_path,
)

__all__ = [
    "BLOCK_META",
    "BUILD_DIR",
    "FOLDED",
    "PLAN",
    "TREE_ENTRY",
    "TREE_SUMMARY",
    "WRITTEN",
    "BlockContext",
    "encode_blocks",
    "finish_block",
    "fold_blocks",
    "local_path",
    "tree_buckets",
    "tree_source",
    "write_atomic",
    "write_blocks",
    "write_object",
]

BUILD_DIR = ".build"
#: Columns the block encoder reads, in this order, in consensus order: (lamport, message_id)
#: with every period's events together (the job sorts each partition so; the plain writer reads
#: the database so).
ENCODE_COLUMNS = ("seq", "message_id", "channel", "sender", "lamport", "wire", "received_at",
                  "recon_key")
BLOCK_META = ("period long, k long, count long, first_ns long, sidecar_hash binary, "
              "bounds array<binary>")
FOLDED = "block long, start binary, end binary"
#: A block for pass 2 (``finish_block``'s plan) and what pass 2 returns for it.
PLAN = ("period long, k long, block long, first_ns long, start binary, end binary, "
        "sidecar_hash binary")
WRITTEN = "block long, path string, file_hash binary"
TREE_ENTRY = "key binary, file long, item long, bucket long"
TREE_ENTRY_FIELDS = "key: binary, file: bigint, item: bigint, bucket: bigint"
TREE_SUMMARY = ("bucket long, first binary, last binary, lanes array<long>, count long, "
                "cid string, closes long")


def local_path(location: str | Path) -> Path:
    """A snapshot location as a POSIX path (``file:///x`` and ``/x`` are the same place)."""
    text = str(location)
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        raise ValueError(f"{location}: only local or shared POSIX paths (or file://) are "
                         "supported as a snapshot location")
    return Path(text)


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


@dataclass(frozen=True)
class BlockContext:
    """What every block task needs (pickled into the task closures; a few strings)."""

    out: str
    build: str
    node: str
    sidecars: bool
    period_ms: int
    max_events: int

    def scratch(self, period: int, k: int, suffix: str) -> Path:
        return Path(self.build) / f"{period}-{k}.{suffix}"

    def record_dir(self) -> str:
        return f"record{self.node}"


class BlockEncoder:
    """Pass 1 for rows of ``ENCODE_COLUMNS`` in consensus order, each period's rows together:
    ``group_of`` numbers the next event (its rank in its millisecond, its index in its period,
    hence its block ``k`` and item), ``add`` encodes it into its block; ``close`` stores the block
    (scratch items and tree entries, the sidecar file, the item hashes) and returns its metadata.

    The numbering needs nothing but the rows before it in the same period, so one sorted pass
    gives every event its consensus time and file: ``group_of`` is called exactly once per row,
    just before ``add`` (``group_ends`` and the plain writer do so)."""

    def __init__(self, ctx: BlockContext) -> None:
        self.ctx = ctx
        self._reset(None)
        self._period = self._lamport = -1
        self._index = self._rank = self._k = 0

    def _reset(self, block: tuple[int, int] | None) -> None:
        self.block = block
        self.body = BlockBody(self.ctx.sidecars)
        self.keys: list[bytes] = []
        self.bounds: list[bytes] = []

    def group_of(self, row: Sequence[Any]) -> tuple[int, int]:
        """Number the row (the next one in consensus order); its block (period, k)."""
        lamport = row[4]
        period = lamport // self.ctx.period_ms
        if period != self._period:
            if period < self._period:
                raise RuntimeError(f"period {period} arrived after period {self._period}")
            self._period, self._index, self._lamport = period, 0, -1
        if lamport == self._lamport:
            self._rank += 1
        elif lamport < self._lamport:
            raise RuntimeError(f"lamport {lamport} arrived after {self._lamport}")
        else:
            self._lamport, self._rank = lamport, 0
        self._k = self._index // self.ctx.max_events
        self._index += 1
        return period, self._k

    def add(self, row: Sequence[Any]) -> None:
        seq, mid, channel, sender, lamport, wire, received, key = row
        block = (self._period, self._k)
        if self.block != block:
            self._reset(block)
        self.body.add(seq, mid, channel, sender, lamport, wire, received,
                      consensus_time_ns(lamport, self._rank))
        self.keys.append(key)
        if closes_bucket(key):
            self.bounds.append(key)

    def close(self) -> dict[str, Any]:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        assert self.block is not None
        ctx, (period, k), body = self.ctx, self.block, self.body
        write_atomic(ctx.scratch(period, k, "items"), body.body)
        write_atomic(ctx.scratch(period, k, "hashes"), body.hashes)
        table = pa.table({"key": pa.array(self.keys, pa.binary()),
                          "item": pa.array(range(len(self.keys)), pa.int64())})
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        write_atomic(ctx.scratch(period, k, "keys"), sink.getvalue().to_pybytes())
        side_hash = None
        if ctx.sidecars:
            raw = body.sidecar
            side_hash = sha384(raw)
            name = sidecar_file_name(record_file_name(body.first_ns), SIDECAR_ID)
            write_atomic(Path(ctx.out) / ctx.record_dir() / "sidecar" / name,
                         gzip_deterministic(raw))
        meta = {"period": period, "k": k, "count": body.count, "first_ns": body.first_ns,
                "sidecar_hash": side_hash, "bounds": self.bounds}
        self._reset(None)
        return meta


class _Grouper(Protocol):
    def group_of(self, row: Sequence[Any]) -> Hashable: ...
    def add(self, row: Sequence[Any]) -> None: ...
    def close(self) -> dict[str, Any]: ...


def group_ends(state: _Grouper, batches: Iterator[tuple[Any, ...]], arrow_type: Any
               ) -> Iterator[Any]:
    """An Arrow SCALAR_ITER UDF body over rows sorted by group: null for every row but the last
    of each group, which gets ``state.close()``. One batch is held back (Spark allows reading
    ahead), so a group ending a batch is closed by the next batch's first row or by the end."""
    import pyarrow as pa

    held: list[Any] | None = None
    last: tuple[list[Any], int] | None = None
    current: Hashable = _NO_GROUP
    for cols in batches:
        columns = [c.to_pylist() for c in cols]
        out: list[Any] = [None] * len(columns[0])
        for i, row in enumerate(zip(*columns, strict=True)):
            group = state.group_of(row)
            if group != current:
                if last is not None:
                    last[0][last[1]] = state.close()
                current = group
            state.add(row)
            last = (out, i)
        if held is not None:
            yield pa.array(held, type=arrow_type)
        held = out
    if last is not None:
        last[0][last[1]] = state.close()
    if held is not None:
        yield pa.array(held, type=arrow_type)


_NO_GROUP = object()


def spark_type(ddl: str) -> Any:
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl)


def arrow_type(ddl: str) -> Any:
    """The Arrow struct type of a Spark DDL field list (on the driver: the parser is there)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    struct = spark_type(ddl)
    assert isinstance(struct, StructType)
    return pa.struct(list(to_arrow_schema(struct)))


def arrow_column(body: Any, ddl: str, *columns: Any) -> Any:
    """An Arrow SCALAR_ITER UDF column (non-deterministic: Spark must neither duplicate nor
    move it, it writes files) returning a struct of ``ddl``."""
    import warnings

    from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf

    with warnings.catch_warnings():
        # pyspark prefers type hints; an explicit SCALAR_ITER type works without pandas.
        warnings.simplefilter("ignore", UserWarning)
        udf = arrow_udf(body, spark_type(ddl), ArrowUDFType.SCALAR_ITER)
    return udf.asNondeterministic()(*columns)


def encode_blocks(ctx: BlockContext) -> Any:
    """Pass 1's UDF body: ``BLOCK_META`` at each block's last row."""
    kind = arrow_type(BLOCK_META)

    def run(batches: Iterator[tuple[Any, ...]]) -> Iterator[Any]:
        return group_ends(BlockEncoder(ctx), batches, kind)

    return run


def fold_rows(ctx: BlockContext, rows: Iterable[tuple[int, int]], start: bytes,
              first_block: int) -> Iterator[dict[str, Any]]:
    """Blocks (period, k) in order -> block number, start and end running hash, from the item
    hashes pass 1 stored: the one sequential step (one SHA-384 of 108 bytes per event)."""
    running, block = start, first_block
    for period, k in rows:
        end = fold_item_hashes(running, ctx.scratch(period, k, "hashes").read_bytes())
        yield {"block": block, "start": running, "end": end}
        running, block = end, block + 1


def fold_blocks(ctx: BlockContext, start: bytes, first_block: int) -> Any:
    """The fold's UDF body over (period, k) in block order, in ONE task: ``FOLDED`` per
    block (the item hashes come from the scratch files, not through Spark)."""
    import pyarrow as pa

    kind = arrow_type(FOLDED)

    def run(batches: Iterator[tuple[Any, ...]]) -> Iterator[Any]:
        running, block = start, first_block
        for periods, ks in batches:
            rows = zip(periods.to_pylist(), ks.to_pylist(), strict=True)
            out = list(fold_rows(ctx, rows, running, block))
            if out:
                running, block = out[-1]["end"], out[-1]["block"] + 1
            yield pa.array(out, type=kind)

    return run


def finish_block(ctx: BlockContext, plan: dict[str, Any]) -> dict[str, Any]:
    """Frame one block's stored items with its chain hashes, gzip and write the record file;
    returns the path and the file hash the driver signs."""
    scratch = ctx.scratch(plan["period"], plan["k"], "items")
    raw = frame_record_file(scratch.read_bytes(), plan["start"], plan["end"], plan["block"],
                            plan["sidecar_hash"])
    path = f"{ctx.record_dir()}/{record_file_name(plan['first_ns'])}"
    write_atomic(Path(ctx.out) / path, gzip_deterministic(raw))
    return {"block": plan["block"], "path": path, "file_hash": sha384(raw)}


def write_blocks(ctx: BlockContext) -> Any:
    """Pass 2's UDF body over plan columns (``PLAN`` order): ``WRITTEN`` per block."""
    import pyarrow as pa

    kind = arrow_type(WRITTEN)
    names = [f.split()[0] for f in PLAN.split(", ")]

    def run(batches: Iterator[tuple[Any, ...]]) -> Iterator[Any]:
        for cols in batches:
            rows = zip(*(c.to_pylist() for c in cols), strict=True)
            yield pa.array([finish_block(ctx, dict(zip(names, row, strict=True)))
                            for row in rows], type=kind)

    return run


def tree_source(ctx: BlockContext, bounds: Any) -> Any:
    """The UDF body turning each source into its tree entries (a list, exploded by the JVM).

    A source row is either a new block (``file`` = its index in the manifest, ``path`` = its
    scratch ``.keys`` file) or an unchanged subtree of the previous tree (``path`` = ``cid:X``).
    ``bounds`` is a broadcast of the sorted bucket-closing keys; ``bucket`` = how many of them
    are smaller than the key."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    def entries_of(file: int, path: str) -> tuple[list[bytes], list[int], list[int]]:
        if path.startswith("cid:"):
            entries = list(iter_leaf_entries(Path(ctx.out), path[4:]))
            return [e.key for e in entries], [e.file for e in entries], [e.item for e in entries]
        with pa.memory_map(path) as source:
            table = ipc.open_file(source).read_all()
        keys = table.column("key").to_pylist()
        return keys, [file] * len(keys), table.column("item").to_pylist()

    fields = list(arrow_type(TREE_ENTRY))

    def run(batches: Iterator[tuple[Any, ...]]) -> Iterator[Any]:
        closing = bounds.value
        for file_col, path_col in batches:
            offsets, keys, files, items = [0], [], [], []
            for file, path in zip(file_col.to_pylist(), path_col.to_pylist(), strict=True):
                k, f, i = entries_of(file, path)
                keys += k
                files += f
                items += i
                offsets.append(len(keys))
            flat = pa.StructArray.from_arrays(
                [pa.array(keys, pa.binary()), pa.array(files, pa.int64()),
                 pa.array(items, pa.int64()),
                 pa.array([bisect_left(closing, k) for k in keys], pa.int64())],
                fields=fields)
            yield pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat)

    return run


def write_object(out: Path, obj: dict[str, Any]) -> str:
    """Write a tree node (unless present) and return its name."""
    cid, raw = encode_node(obj)
    path = out / object_path(cid)
    if not path.exists():  # immutable, named by content: an unchanged node stays as it is
        write_atomic(path, raw)
    return cid


class BucketBuilder:
    """The tree stage for entries (key, file, item, bucket) in (bucket, key) order: ``close``
    writes the bucket's nodes (levels 0 to ``BUCKET_LEVEL - 1``) and returns its summary."""

    def __init__(self, ctx: BlockContext) -> None:
        self.out = Path(ctx.out)
        self.entries: list[TreeEntry] = []
        self.bucket = -1

    @staticmethod
    def group_of(row: Sequence[Any]) -> int:
        return int(row[3])

    def add(self, row: Sequence[Any]) -> None:
        self.bucket = row[3]
        self.entries.append(TreeEntry(row[0], row[1], row[2]))

    def close(self) -> dict[str, Any]:
        summaries = build_buckets(self.entries, lambda obj: write_object(self.out, obj))
        self.entries = []
        if len(summaries) != 1:
            raise RuntimeError(f"bucket {self.bucket} made {len(summaries)} level-"
                               f"{BUCKET_LEVEL - 1} nodes")
        s = summaries[0]
        return {"bucket": self.bucket, "first": s.first, "last": s.last, "lanes": list(s.lanes),
                "count": s.count, "cid": s.cid, "closes": s.closes}


def tree_buckets(ctx: BlockContext) -> Any:
    """The tree stage's UDF body: ``TREE_SUMMARY`` at each bucket's last row."""
    kind = arrow_type(TREE_SUMMARY)

    def run(batches: Iterator[tuple[Any, ...]]) -> Iterator[Any]:
        return group_ends(BucketBuilder(ctx), batches, kind)

    return run


def summary_of(row: Any) -> Summary:
    return Summary(bytes(row["first"]), bytes(row["last"]), tuple(row["lanes"]),
                   int(row["count"]), str(row["cid"]), int(row["closes"]))
