"""The snapshot job's steps as DataFrame transforms: each takes a DataFrame and returns one.

The bodies they run are in :mod:`spark_jobs.snapshot_tasks` (the plain writer runs the same
bodies in one process); :func:`spark_jobs.snapshot.run` wires them: JDBC read ->
:func:`encode_periods` -> :func:`fold_chain` -> collect (per block) -> :func:`block_plans`
-> :func:`write_records` -> collect, sign -> :func:`tree_sources` -> :func:`tree_entries` ->
:func:`bucket_nodes` -> collect (per bucket) -> manifest. Every transform whose body writes
files marks its UDF non-deterministic, so Spark neither runs it twice nor moves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_jobs.snapshot_tasks import (
    BLOCK_META,
    ENCODE_COLUMNS,
    FOLDED,
    PLAN,
    TREE_ENTRY_FIELDS,
    TREE_SUMMARY,
    WRITTEN,
    BlockContext,
    arrow_column,
    encode_blocks,
    fold_blocks,
    tree_buckets,
    tree_source,
    write_blocks,
)

__all__ = ["PLAN_FIELDS", "block_plans", "bucket_nodes", "encode_periods", "fold_chain",
           "tree_entries", "tree_sources", "write_records"]

#: A block's plan for pass 2 (what ``finish_block`` needs), in ``PLAN`` order.
PLAN_FIELDS = ("period", "k", "block", "first_ns", "start", "end", "sidecar_hash")


def encode_periods(events: Any, ctx: BlockContext, partitions: int) -> Any:
    """Pass 1: events (``ENCODE_COLUMNS``) -> one ``BLOCK_META`` row per block (period, k,
    count, first_ns, sidecar_hash, bounds); the tasks write the sidecars and scratch files.

    The one shuffle of the events: a period's events to one task, sorted in consensus order,
    so the encoder numbers them as they stream by (rank, index, block, item)."""
    from pyspark.sql import functions as F

    meta = arrow_column(encode_blocks(ctx), BLOCK_META, *(F.col(c) for c in ENCODE_COLUMNS))
    period = F.floor(F.col("lamport") / F.lit(ctx.period_ms)).cast("long")
    return (events.withColumn("period", period).repartition(max(1, partitions), "period")
            .sortWithinPartitions("period", "lamport", "message_id")
            .select(meta.alias("m")).where(F.col("m").isNotNull()).select("m.*"))


def fold_chain(blocks: Any, ctx: BlockContext, start: bytes, first_block: int) -> Any:
    """Block metadata -> the same rows plus ``block``, ``start`` and ``end`` (the running hash
    folded over every block's item hashes in block order: ONE task)."""
    from pyspark.sql import functions as F

    fold = arrow_column(fold_blocks(ctx, start, first_block), FOLDED, F.col("period"),
                        F.col("k"))
    return (blocks.repartition(1).sortWithinPartitions("period", "k")
            .select("period", "k", "count", "first_ns", "sidecar_hash", "bounds",
                    fold.alias("f"))
            .select("period", "k", "count", "first_ns", "sidecar_hash", "bounds", "f.*"))


def block_plans(spark: Any, blocks: Sequence[dict[str, Any]], partitions: int) -> Any:
    """The folded blocks (collected on the driver) as a DataFrame of ``PLAN`` rows, in at most
    ``partitions`` slices (no shuffle: a few hundred small rows)."""
    rows = [tuple(b[f] for f in PLAN_FIELDS) for b in blocks]
    rdd = spark.sparkContext.parallelize(rows, max(1, min(partitions, len(rows))))
    return spark.createDataFrame(rdd, PLAN)


def write_records(plans: Any, ctx: BlockContext) -> Any:
    """Pass 2: ``PLAN`` rows -> ``WRITTEN`` rows (block, path, file_hash); each task frames its
    blocks' scratch items with the chain hashes, gzips and writes the record files."""
    from pyspark.sql import functions as F

    written = arrow_column(write_blocks(ctx), WRITTEN, *(F.col(f) for f in PLAN_FIELDS))
    return plans.select(written.alias("w")).select("w.*")


def tree_sources(spark: Any, groups: Sequence[Sequence[tuple[int, str]]]) -> Any:
    """Tree sources (file, path) as a DataFrame, one partition per group (``source_groups``
    bounds the entries of a group, hence of one task's Arrow batch)."""
    rdd = spark.sparkContext.parallelize(list(groups), max(1, len(groups))).flatMap(lambda g: g)
    return spark.createDataFrame(rdd, "file long, path string")


def tree_entries(sources: Any, ctx: BlockContext, bounds: Any) -> Any:
    """Sources -> tree entries (key, file, item, bucket), exploded in the JVM; ``bounds`` is a
    broadcast of the sorted bucket-closing keys."""
    from pyspark.sql import functions as F

    return sources.select(F.inline(arrow_column(
        tree_source(ctx, bounds), f"array<struct<{TREE_ENTRY_FIELDS}>>",
        F.col("file"), F.col("path"))))


def bucket_nodes(entries: Any, ctx: BlockContext, partitions: int) -> Any:
    """Tree entries -> one ``TREE_SUMMARY`` row per bucket; the tasks write every node of the
    bucket's levels 0 to 2 (entries sorted by (bucket, key) in their partition)."""
    from pyspark.sql import functions as F

    summary = arrow_column(tree_buckets(ctx), TREE_SUMMARY, F.col("key"), F.col("file"),
                           F.col("item"), F.col("bucket"))
    return (entries.repartition(max(1, partitions), "bucket")
            .sortWithinPartitions("bucket", "key")
            .select(summary.alias("s")).where(F.col("s").isNotNull()).select("s.*"))
