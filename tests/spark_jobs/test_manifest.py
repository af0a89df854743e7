"""The manifest's range tree (pure: no Spark) and the JDBC URL mapping."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.source import jdbc_source
from storage.snapshot_files import (
    iter_leaf_entries,
    load_manifest,
    read_object,
    write_manifest,
    write_objects,
)
from sync.errors import RemoteProtocolError
from sync.recon.sha256a import Sha256a
from sync.snapshot_manifest import Chain, FileEntry, Manifest, TreeEntry, build_tree


def _keys(seeds: set[int]) -> list[bytes]:
    return sorted(b"\xce\x01\x05\x01" + hashlib.sha256(str(s).encode()).digest() for s in seeds)


def _entries(keys: list[bytes]) -> list[TreeEntry]:
    return [TreeEntry(k, i % 7, i) for i, k in enumerate(keys)]


def _walk(objects: dict[str, bytes], cid: str) -> Any:
    import json

    return json.loads(objects[cid])


def _check_node(cid: str, objects: dict[str, bytes]) -> list[bytes]:
    node = _walk(objects, cid)
    if node["level"] == 0:
        return [bytes.fromhex(k["key"]) for k in node["keys"]]
    keys: list[bytes] = []
    for child in node["children"]:
        below = _check_node(child["cid"], objects)
        assert below[0].hex() == child["first"] and below[-1].hex() == child["last"]
        assert Sha256a.of(below).hex() == child["ahash"] and len(below) == child["count"]
        keys.extend(below)
    return keys


@settings(deadline=None, max_examples=15)
@given(st.sets(st.integers(0, 10**6), max_size=1500), st.sets(st.integers(0, 10**6), max_size=300))
def test_tree_covers_every_key_with_correct_hashes(base: set[int], extra: set[int]) -> None:
    keys = _keys(base)
    root, objects, total = build_tree(_entries(keys))
    assert total == Sha256a.of(keys)
    assert _check_node(root, objects) == keys
    assert build_tree(_entries(keys))[0] == root  # deterministic
    more = _keys(base | extra)
    assert _check_node(*build_tree(_entries(more))[:2]) == more


def test_a_few_new_keys_leave_most_nodes_unchanged() -> None:
    # Content-defined boundaries: only nodes on the new keys' paths change (item numbers are
    # per key here, so the entries stay the same for old keys).
    keys = _keys(set(range(5000)))
    _root, objects, _ = build_tree(TreeEntry(k, 0, 0) for k in keys)
    _root2, objects2, _ = build_tree(TreeEntry(k, 0, 0) for k in _keys(set(range(5003))))
    assert len(set(objects) & set(objects2)) > 0.8 * len(objects)


def test_tree_round_trip_on_disk(tmp_path: Path) -> None:
    keys = _keys(set(range(500)))
    root, objects, total = build_tree(_entries(keys))
    assert write_objects(tmp_path, objects) == len(objects)
    assert write_objects(tmp_path, objects) == 0  # immutable: never rewritten
    assert [e.key for e in iter_leaf_entries(tmp_path, root)] == keys
    manifest = Manifest(network_id=3, node="n", period_ms=1000, chain=Chain(2, "ab" * 48, 5),
                        files=(FileEntry("recordn/a.rcd.gz", 0, 4, 10, 1, "00", "11", "22",
                                         "recordn/a.rcd_sig", ("recordn/sidecar/a_01.rcd.gz",)),),
                        root=root, count=total.count, ahash=total.hex())
    write_manifest(tmp_path, manifest)
    assert load_manifest(tmp_path) == manifest
    assert load_manifest(tmp_path / "nowhere") is None
    # A node whose bytes do not match its name is refused.
    path = next((tmp_path / "manifest").iterdir())
    path.write_bytes(path.read_bytes().replace(b"level", b"levee"))
    with pytest.raises(RemoteProtocolError):
        read_object(tmp_path, path.stem)
    (tmp_path / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(RemoteProtocolError):
        load_manifest(tmp_path)


def test_empty_tree() -> None:
    root, objects, total = build_tree([])
    assert total == Sha256a() and _walk(objects, root) == {"level": 0, "keys": []}


def test_jdbc_urls(tmp_path: Path) -> None:
    lite = jdbc_source(f"sqlite:///{tmp_path}/node.db")
    assert lite.url == f"jdbc:sqlite:{tmp_path}/node.db" and lite.driver == "org.sqlite.JDBC"
    pg = jdbc_source("postgresql+psycopg://u:secret@db.example:5433/syncnode")
    assert pg.url == "jdbc:postgresql://db.example:5433/syncnode"
    assert pg.properties == {"user": "u", "password": "secret"}
    with pytest.raises(ValueError):
        jdbc_source("sqlite://")
    with pytest.raises(ValueError):
        jdbc_source("mysql://x/y")


@settings(deadline=None, max_examples=10)
@given(st.sets(st.integers(0, 10**7), min_size=0, max_size=3000))
def test_buckets_built_apart_and_joined_equal_the_whole_tree(seeds: set[int]) -> None:
    """What the snapshot job's tasks do (each bucket on its own, the driver joins the bucket
    nodes) gives the same root and the same node bytes as one ``build_tree`` over all keys."""
    from sync.snapshot_manifest import (
        BUCKET_LEVEL,
        build_buckets,
        closes_bucket,
        join_buckets,
        object_emitter,
    )

    # Keys that close buckets are rare (1 in 32^3): add some so most examples have several.
    keys = sorted(set(_keys(seeds)) | set(_bucket_closers(len(seeds) // 500)))
    entries = _entries(keys)
    root, objects, total = build_tree(entries)
    buckets: list[list[TreeEntry]] = [[]]
    for e in entries:
        buckets[-1].append(e)
        if closes_bucket(e.key):
            buckets.append([])
    apart: dict[str, bytes] = {}
    emit = object_emitter(apart)
    summaries = []
    for bucket in (b for b in buckets if b):
        made = build_buckets(bucket, emit)
        assert len(made) == 1  # one level-(BUCKET_LEVEL - 1) node per bucket
        summaries.extend(made)
    assert join_buckets(summaries, emit) == (root, total)
    assert apart == objects
    import json

    assert json.loads(objects[root])["level"] >= (BUCKET_LEVEL - 1 if keys else 0)


def _bucket_closers(n: int) -> list[bytes]:
    from sync.snapshot_manifest import closes_bucket

    found: list[bytes] = []
    i = 0
    while len(found) < n:
        key = b"\xce\x01\x05\x01" + hashlib.sha256(f"closer {i}".encode()).digest()
        if closes_bucket(key):
            found.append(key)
        i += 1
    return found


def test_old_units_of_a_deep_tree_cover_it_in_buckets(tmp_path: Path) -> None:
    """An incremental build re-reads the previous tree as its level-2 nodes (buckets): they
    hold every entry once, in order, and every one but the last ends with a bucket-closing
    key."""
    from spark_jobs.snapshot import old_units
    from storage.snapshot_files import iter_leaf_entries, write_objects
    from sync.snapshot_manifest import BUCKET_LEVEL, closes_bucket

    keys = sorted(set(_keys(set(range(3000)))) | set(_bucket_closers(40)))
    root, objects, _ = build_tree(_entries(keys))
    write_objects(tmp_path, objects)
    assert json.loads(objects[root])["level"] > BUCKET_LEVEL  # deep enough to descend twice
    units = old_units(tmp_path, root)
    covered = [e.key for cid, _last, _n in units for e in iter_leaf_entries(tmp_path, cid)]
    assert covered == keys
    assert [n for _c, _l, n in units] == [
        sum(1 for _ in iter_leaf_entries(tmp_path, cid)) for cid, _l, _n in units]
    assert all(closes_bucket(last) for _c, last, _n in units[:-1])
