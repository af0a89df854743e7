"""Snapshot directories on the local file system: reading and writing the manifest and the
range-tree objects of ``sync.snapshot_manifest``.

The format itself (dataclasses, canonical bytes, the range tree, checks of what is read) is
sans-IO in ``sync.snapshot_manifest``; this module only moves bytes between it and a snapshot
directory, every read bounded by the format's size limits. Both the snapshot job
(``spark_jobs``) and the node's bootstrap read snapshots through it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sync.snapshot_manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    MAX_OBJECT_BYTES,
    Manifest,
    TreeEntry,
    decode_manifest,
    decode_object,
    leaf_entries,
    object_path,
)

__all__ = ["iter_leaf_entries", "load_manifest", "read_object", "write_manifest", "write_objects"]


def _read_limited(path: Path, limit: int) -> bytes:
    # One byte more than the limit: the decoder tells a too-large file from one at the limit.
    with path.open("rb") as fh:
        return fh.read(limit + 1)


def read_object(snapshot: Path, cid: str) -> dict[str, Any]:
    """A tree node, checked against its name (a dumb store may hand back anything)."""
    path = snapshot / object_path(cid)
    return decode_object(cid, _read_limited(path, MAX_OBJECT_BYTES), str(path))


def iter_leaf_entries(snapshot: Path, cid: str) -> Iterator[TreeEntry]:
    """Every entry under a node, in key order."""
    obj = read_object(snapshot, cid)
    if obj.get("level") == 0:
        yield from leaf_entries(obj)
    else:
        for child in obj["children"]:
            yield from iter_leaf_entries(snapshot, child["cid"])


def load_manifest(snapshot: Path) -> Manifest | None:
    """The snapshot's manifest, or None when the directory holds none (yet)."""
    path = snapshot / MANIFEST_NAME
    if not path.exists():
        return None
    return decode_manifest(_read_limited(path, MAX_MANIFEST_BYTES), str(path))


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def write_objects(snapshot: Path, objects: dict[str, bytes]) -> int:
    """Write tree nodes not already present (they are immutable); returns how many were new."""
    new = 0
    for cid, raw in objects.items():
        path = snapshot / object_path(cid)
        if not path.exists():
            _atomic_write(path, raw)
            new += 1
    return new


def write_manifest(snapshot: Path, manifest: Manifest) -> None:
    """Replace ``manifest.json`` atomically: readers see the old or the new snapshot, whole."""
    _atomic_write(snapshot / MANIFEST_NAME, manifest.to_json())
