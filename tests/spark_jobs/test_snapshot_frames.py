"""The snapshot job's transforms one at a time, on small DataFrames in the local session: each
gives what the one-process writer (``run_plain``) gives for the same log (blocks, chain
hashes, files, tree), whatever order the events come in."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from spark_jobs import testlog
from spark_jobs.plain_snapshot import run_plain
from spark_jobs.snapshot import Build, begin_build, scratch, source_groups
from spark_jobs.snapshot_frames import (
    block_plans,
    bucket_nodes,
    encode_periods,
    fold_chain,
    tree_entries,
    tree_sources,
    write_records,
)
from spark_jobs.snapshot_tasks import ENCODE_COLUMNS, summary_of, write_object
from storage import events, make_engine
from storage.snapshot_files import load_manifest
from sync.snapshot_manifest import Manifest, join_buckets
from tests.spark_jobs.conftest import NETWORK_ID, PERIOD_MS, SPEC

OPTIONS: dict[str, Any] = {"period_ms": PERIOD_MS, "include_open": True, "sidecars": True,
                           "max_events_per_file": 40}
SCHEMA = ("seq long, message_id string, channel string, sender string, lamport long, "
          "wire binary, received_at long, recon_key binary")


def _key() -> Any:
    return testlog.test_key("snapshot-node", 0)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, template_db: Path) -> tuple[Path, Manifest]:
    out = tmp_path_factory.mktemp("plain") / "snapshot"
    run_plain(f"sqlite:///{template_db}", out, _key(), NETWORK_ID, **OPTIONS)
    manifest = load_manifest(out)
    assert manifest is not None
    return out, manifest


@pytest.fixture
def build(template_db: Path, tmp_path: Path) -> Iterator[Build]:
    started = begin_build(f"sqlite:///{template_db}", tmp_path / "job", _key(), NETWORK_ID,
                          settle_ms=0, **OPTIONS)
    assert isinstance(started, Build)
    with scratch(started):
        yield started


def _shuffled_events(spark: Any, template_db: Path) -> Any:
    engine = make_engine(f"sqlite:///{template_db}")
    with engine.connect() as conn:
        rows = [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in
                conn.execute(select(*(events.c[c] for c in ENCODE_COLUMNS)))]
    engine.dispose()
    random.Random(7).shuffle(rows)
    return spark.createDataFrame(rows, SCHEMA).repartition(3)


def _blocks(spark: Any, template_db: Path, build: Build) -> list[dict[str, Any]]:
    folded = fold_chain(encode_periods(_shuffled_events(spark, template_db), build.ctx, 3),
                        build.ctx, build.start, build.first_block)
    return sorted((r.asDict() for r in folded.collect()), key=lambda b: b["block"])


def _files(root: Path, under: str) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in (root / under).rglob("*")
            if p.is_file()}


def test_encode_and_fold_number_the_blocks_and_chain_them(
        spark: Any, template_db: Path, build: Build, plain: tuple[Path, Manifest]) -> None:
    out, manifest = plain
    blocks = _blocks(spark, template_db, build)
    assert [(b["block"], b["period"], b["count"], b["first_ns"], bytes(b["start"]).hex(),
             bytes(b["end"]).hex()) for b in blocks] == [
        (f.block, f.period, f.count, f.first_consensus_ns, f.start_running_hash,
         f.end_running_hash) for f in manifest.files]
    assert sum(b["count"] for b in blocks) == SPEC.events
    # Pass 1 wrote the sidecars, byte for byte the plain writer's.
    sidecars = f"{build.ctx.record_dir()}/sidecar"
    assert _files(build.out, sidecars) == _files(out, sidecars) != {}


def test_write_records_writes_the_plain_writers_record_files(
        spark: Any, template_db: Path, build: Build, plain: tuple[Path, Manifest]) -> None:
    out, manifest = plain
    blocks = _blocks(spark, template_db, build)
    written = write_records(block_plans(spark, blocks, 2), build.ctx).collect()
    assert sorted((w["block"], w["path"], bytes(w["file_hash"]).hex()) for w in written) == [
        (f.block, f.path, f.file_hash) for f in manifest.files]
    for f in manifest.files:
        assert (build.out / f.path).read_bytes() == (out / f.path).read_bytes()


def test_tree_transforms_give_the_plain_writers_tree(
        spark: Any, template_db: Path, build: Build, plain: tuple[Path, Manifest]) -> None:
    out, manifest = plain
    blocks = _blocks(spark, template_db, build)
    sources = [(b["block"], str(build.ctx.scratch(b["period"], b["k"], "keys")), b["count"])
               for b in blocks]
    bounds = spark.sparkContext.broadcast(
        sorted({bytes(k) for b in blocks for k in b["bounds"]}))
    try:
        # Groups of at most 50 entries: several tasks feed the buckets.
        entries = tree_entries(tree_sources(spark, source_groups(sources, 50)), build.ctx,
                               bounds)
        assert entries.count() == SPEC.events
        rows = bucket_nodes(entries, build.ctx, 2).collect()
    finally:
        bounds.unpersist()
    summaries = [summary_of(r) for r in sorted(rows, key=lambda r: int(r["bucket"]))]
    root, ahash = join_buckets(summaries, lambda obj: write_object(build.out, obj))
    assert (root, ahash.hex(), ahash.count) == (manifest.root, manifest.ahash, manifest.count)
    # Every node the tasks and the join wrote is the plain writer's, byte for byte.
    job_nodes = {p: d for p, d in _files(build.out, ".").items()
                 if not p.startswith(("record", ".build"))}
    plain_nodes = {p: d for p, d in _files(out, ".").items()
                   if not p.startswith("record") and p != "manifest.json"}
    assert job_nodes == plain_nodes != {}
