"""The snapshot manifest: the chain state plus a CIP-124 appendix C range tree over the files.

A snapshot directory is an immutable object store::

    manifest.json                  the only mutable object: chain state, files, tree root
    manifest/<cid>.json            tree nodes, named by the sha256 of their bytes (immutable)
    record<node>/*.rcd.gz ...      record stream v6 files, sidecars and signature files

Tree (appendix C: ``(EventID (sub-tree-ahash, sub-tree-CID, EventID)+)+``): an inner node lists
its children as ``{first, last, ahash, count, cid}`` (first/last: the child's smallest and largest
Recon key, ahash: the children's Sha256a); a leaf lists its keys as ``{key, file, item}``: the
event is item ``item`` of ``files[file]``. Node boundaries are content-defined, as in a Merkle
search tree (appendix B): a key ends a level-``L`` node when the low ``L * 5`` bits of its first
Sha256a lane are zero, so the expected fanout is 32 and adding keys changes only the nodes on
their paths; an incremental rebuild rewrites a few nodes and reuses the others by name.

A client holding part of the log fetches the root, skips every child whose ``(ahash, count)``
equals its own range hash over ``[first, last]`` and descends into the others; at the leaves it
fetches only the items it lacks. Pure functions here; reading and writing are in small helpers.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sync.errors import RemoteProtocolError
from sync.recon.sha256a import MASK32, Sha256a, lanes_of

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "OBJECTS_DIR",
    "Chain",
    "FileEntry",
    "Manifest",
    "TreeEntry",
    "build_tree",
    "cid_of",
    "iter_leaf_entries",
    "key_level",
    "load_manifest",
    "read_object",
    "write_manifest",
    "write_objects",
]

FORMAT = "syncnode-snapshot-manifest/1"
MANIFEST_NAME = "manifest.json"
OBJECTS_DIR = "manifest"
FANOUT_BITS = 5
MAX_OBJECT_BYTES = 16 << 20
MAX_MANIFEST_BYTES = 256 << 20
_MAX_LEVEL = 6


@dataclass(frozen=True)
class FileEntry:
    """One record file of the chain (paths relative to the snapshot directory)."""

    path: str
    block: int
    period: int
    count: int
    first_consensus_ns: int
    start_running_hash: str
    end_running_hash: str
    file_hash: str
    signature: str
    sidecars: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chain:
    """Where the next incremental build continues from."""

    next_block: int = 0
    running_hash: str = "00" * 48
    last_period: int = -1


@dataclass(frozen=True)
class TreeEntry:
    key: bytes
    file: int
    item: int


@dataclass(frozen=True)
class Manifest:
    network_id: int
    node: str
    period_ms: int
    chain: Chain = field(default_factory=Chain)
    files: tuple[FileEntry, ...] = ()
    root: str = ""
    count: int = 0
    ahash: str = Sha256a().hex()
    format: str = FORMAT

    def to_json(self) -> bytes:
        data = asdict(self)
        return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        try:
            data = json.loads(raw)
            if data.get("format") != FORMAT:
                raise RemoteProtocolError(f"unknown manifest format {data.get('format')!r}")
            files = tuple(
                FileEntry(**{**f, "sidecars": tuple(f.get("sidecars", ()))}) for f in data["files"]
            )
            return cls(
                network_id=int(data["network_id"]), node=str(data["node"]),
                period_ms=int(data["period_ms"]), chain=Chain(**data["chain"]), files=files,
                root=str(data["root"]), count=int(data["count"]), ahash=str(data["ahash"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise RemoteProtocolError(f"invalid manifest: {exc}", MANIFEST_NAME) from None


def key_level(key: bytes) -> int:
    """How many tree levels ``key`` closes: the number of zero 5-bit groups at the bottom of its
    first Sha256a lane (capped)."""
    lane = lanes_of(key)[0]
    level = 0
    while level < _MAX_LEVEL and lane & ((1 << FANOUT_BITS) - 1) == 0:
        level += 1
        lane >>= FANOUT_BITS
    return level


def _object_bytes(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def cid_of(raw: bytes) -> str:
    """Content address of a tree node: hex sha256 of its bytes."""
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class _Summary:
    first: bytes
    last: bytes
    lanes: tuple[int, ...]
    count: int
    cid: str
    closes: int  # level of the last key: which ancestors it closes

    def entry(self) -> dict[str, Any]:
        return {"first": self.first.hex(), "last": self.last.hex(), "count": self.count,
                "ahash": Sha256a(self.lanes, self.count).hex(), "cid": self.cid}


def _add(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple((x + y) & MASK32 for x, y in zip(a, b, strict=True))


def build_tree(entries: Iterable[TreeEntry]) -> tuple[str, dict[str, bytes], Sha256a]:
    """(root cid, {cid: node bytes}, Sha256a of everything) over entries sorted by key."""
    objects: dict[str, bytes] = {}

    def emit(obj: dict[str, Any]) -> str:
        raw = _object_bytes(obj)
        cid = cid_of(raw)
        objects[cid] = raw
        return cid

    summaries: list[_Summary] = []
    chunk: list[TreeEntry] = []
    lanes: tuple[int, ...] = (0,) * 8
    prev: bytes | None = None

    def close_leaf(level: int) -> None:
        nonlocal chunk, lanes
        cid = emit({"level": 0, "keys": [
            {"key": e.key.hex(), "file": e.file, "item": e.item} for e in chunk]})
        summaries.append(_Summary(chunk[0].key, chunk[-1].key, lanes, len(chunk), cid, level))
        chunk, lanes = [], (0,) * 8

    for e in entries:
        if prev is not None and e.key <= prev:
            raise ValueError("tree entries must be strictly ascending by key")
        prev = e.key
        chunk.append(e)
        lanes = _add(lanes, lanes_of(e.key))
        level = key_level(e.key)
        if level >= 1:
            close_leaf(level)
    if chunk:
        close_leaf(0)
    if not summaries:
        return emit({"level": 0, "keys": []}), objects, Sha256a()
    level = 1
    while len(summaries) > 1 or level == 1:
        parents: list[_Summary] = []
        group: list[_Summary] = []
        for s in summaries:
            group.append(s)
            if s.closes > level:
                parents.append(_parent(group, level, emit))
                group = []
        if group:
            parents.append(_parent(group, level, emit))
        summaries = parents
        level += 1
        if level > _MAX_LEVEL + 1 and len(summaries) > 1:
            # Every key closes at most _MAX_LEVEL levels: above that, group everything.
            summaries = [_parent(summaries, level, emit)]
    root = summaries[0]
    return root.cid, objects, Sha256a(root.lanes, root.count)


def _parent(group: list[_Summary], level: int, emit: Any) -> _Summary:
    lanes: tuple[int, ...] = (0,) * 8
    for s in group:
        lanes = _add(lanes, s.lanes)
    cid = emit({"level": level, "children": [s.entry() for s in group]})
    return _Summary(group[0].first, group[-1].last, lanes, sum(s.count for s in group), cid,
                    group[-1].closes)


def read_object(snapshot: Path, cid: str) -> dict[str, Any]:
    """A tree node, checked against its name (a dumb store may hand back anything)."""
    if len(cid) != 64 or not all(c in "0123456789abcdef" for c in cid):
        raise RemoteProtocolError(f"bad tree node name {cid!r}", OBJECTS_DIR)
    path = snapshot / OBJECTS_DIR / f"{cid}.json"
    with path.open("rb") as fh:
        raw = fh.read(MAX_OBJECT_BYTES + 1)
    if len(raw) > MAX_OBJECT_BYTES or cid_of(raw) != cid:
        raise RemoteProtocolError(f"tree node {cid} does not match its name", str(path))
    try:
        obj: dict[str, Any] = json.loads(raw)
    except ValueError:
        raise RemoteProtocolError(f"tree node {cid} is not JSON", str(path)) from None
    return obj


def iter_leaf_entries(snapshot: Path, cid: str) -> Iterator[TreeEntry]:
    """Every entry under a node, in key order."""
    obj = read_object(snapshot, cid)
    if obj.get("level") == 0:
        for k in obj["keys"]:
            yield TreeEntry(bytes.fromhex(k["key"]), int(k["file"]), int(k["item"]))
    else:
        for child in obj["children"]:
            yield from iter_leaf_entries(snapshot, child["cid"])


def load_manifest(snapshot: Path) -> Manifest | None:
    path = snapshot / MANIFEST_NAME
    if not path.exists():
        return None
    with path.open("rb") as fh:
        raw = fh.read(MAX_MANIFEST_BYTES + 1)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise RemoteProtocolError("manifest too large", str(path))
    return Manifest.from_json(raw)


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
        path = snapshot / OBJECTS_DIR / f"{cid}.json"
        if not path.exists():
            _atomic_write(path, raw)
            new += 1
    return new


def write_manifest(snapshot: Path, manifest: Manifest) -> None:
    """Replace ``manifest.json`` atomically: readers see the old or the new snapshot, whole."""
    _atomic_write(snapshot / MANIFEST_NAME, manifest.to_json())
