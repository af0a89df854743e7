"""The snapshot manifest format: chain state plus a CIP-124 appendix C range tree (sans-IO).

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

This module only encodes, decodes and checks bytes: the snapshot job (``storage.snapshot_files``
writes and reads the files) and the node's bootstrap / pull (``node.snapshots.bootstrap``) both
use it, so neither depends on the other.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from sync.errors import RemoteProtocolError
from sync.recon.sha256a import MASK32, Sha256a, lanes_of

__all__ = [
    "BUCKET_LEVEL",
    "FORMAT",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "MAX_OBJECT_BYTES",
    "OBJECTS_DIR",
    "Chain",
    "Emit",
    "FileEntry",
    "Manifest",
    "Summary",
    "TreeEntry",
    "build_buckets",
    "build_tree",
    "cid_of",
    "closes_bucket",
    "decode_manifest",
    "decode_object",
    "encode_node",
    "join_buckets",
    "key_level",
    "leaf_entries",
    "object_emitter",
    "object_path",
]

FORMAT = "syncnode-snapshot-manifest/1"
MANIFEST_NAME = "manifest.json"
OBJECTS_DIR = "manifest"
FANOUT_BITS = 5
#: Read at most this many bytes (+1, to detect more) of a tree node / of the manifest: a dumb
#: store may hand back anything, and a reader must not load an unbounded file.
MAX_OBJECT_BYTES = 16 << 20
MAX_MANIFEST_BYTES = 256 << 20
_MAX_LEVEL = 6
_HEX = frozenset("0123456789abcdef")


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
            files = tuple(_typed(FileEntry, {**f, "sidecars": tuple(f.get("sidecars", ()))})
                          for f in _typed_list(data["files"], "files"))
            return cls(
                network_id=_int(data["network_id"], "network_id"), node=_str(data["node"], "node"),
                period_ms=_int(data["period_ms"], "period_ms"),
                chain=_typed(Chain, data["chain"]), files=files,
                root=_str(data["root"], "root"), count=_int(data["count"], "count"),
                ahash=_str(data["ahash"], "ahash"),
            )
        except RecursionError:
            raise RemoteProtocolError("invalid manifest: JSON nested too deeply",
                                      MANIFEST_NAME) from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RemoteProtocolError(f"invalid manifest: {exc}", MANIFEST_NAME) from None


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {type(value).__name__}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _typed_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    return value


_T = TypeVar("_T")


def _typed(cls: type[_T], data: Any) -> _T:
    """``cls(**data)`` with every field checked against its declared type (int, str, tuple)."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__} entry must be an object, got {type(data).__name__}")
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value, kind = data[f.name], str(f.type)
        if kind == "int":
            _int(value, f"{cls.__name__}.{f.name}")
        elif kind == "str":
            _str(value, f"{cls.__name__}.{f.name}")
        elif not all(isinstance(v, str) for v in value):
            raise ValueError(f"{cls.__name__}.{f.name} must hold strings")
    return cls(**data)


def decode_manifest(raw: bytes, where: str = MANIFEST_NAME) -> Manifest:
    """``manifest.json``'s bytes (read with a limit of ``MAX_MANIFEST_BYTES + 1``) decoded."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise RemoteProtocolError("manifest too large", where)
    return Manifest.from_json(raw)


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


def encode_node(obj: dict[str, Any]) -> tuple[str, bytes]:
    """(cid, canonical bytes) of a tree node."""
    raw = _object_bytes(obj)
    return cid_of(raw), raw


def cid_of(raw: bytes) -> str:
    """Content address of a tree node: hex sha256 of its bytes."""
    return hashlib.sha256(raw).hexdigest()


def object_path(cid: str) -> str:
    """Where tree node ``cid`` lives, relative to the snapshot directory. The name is checked
    first: it comes from a manifest or a parent node, and must not point elsewhere."""
    if len(cid) != 64 or not _HEX.issuperset(cid):
        raise RemoteProtocolError(f"bad tree node name {cid!r}", OBJECTS_DIR)
    return f"{OBJECTS_DIR}/{cid}.json"


def decode_object(cid: str, raw: bytes, where: str = "") -> dict[str, Any]:
    """A tree node's bytes (read with a limit of ``MAX_OBJECT_BYTES + 1``), checked against
    its name (a dumb store may hand back anything) and decoded."""
    where = where or object_path(cid)
    if len(raw) > MAX_OBJECT_BYTES or cid_of(raw) != cid:
        raise RemoteProtocolError(f"tree node {cid} does not match its name", where)
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        raise RemoteProtocolError(f"tree node {cid} is not JSON", where) from None
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"tree node {cid} is not an object", where)
    return obj


def leaf_entries(obj: dict[str, Any]) -> list[TreeEntry]:
    """The entries of a leaf node (``level`` 0)."""
    try:
        return [TreeEntry(bytes.fromhex(k["key"]), int(k["file"]), int(k["item"]))
                for k in obj["keys"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise RemoteProtocolError(f"invalid tree leaf: {exc}", OBJECTS_DIR) from None


@dataclass(frozen=True)
class Summary:
    """A built node as its parent lists it (plus which ancestors its last key closes)."""

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


#: Tree nodes up to level ``BUCKET_LEVEL - 1`` are built per *bucket*: the keys after one key
#: of level >= ``BUCKET_LEVEL`` up to and including the next. Such a key closes every node below
#: that level, so each bucket is exactly one level-``BUCKET_LEVEL - 1`` node and buckets can be
#: built apart (a Spark task each, ~32^3 keys expected) and joined above. Every tree has at least
#: these levels (a one-key snapshot's root is level 2), so the split build equals ``build_tree``.
BUCKET_LEVEL = 3

Emit = Callable[[dict[str, Any]], str]


def closes_bucket(key: bytes) -> bool:
    """Whether ``key`` is the last key of its bucket (``BUCKET_LEVEL``)."""
    return key_level(key) >= BUCKET_LEVEL


def object_emitter(objects: dict[str, bytes]) -> Emit:
    """An ``Emit`` that encodes a node, stores its bytes in ``objects`` and returns its cid."""
    def emit(obj: dict[str, Any]) -> str:
        cid, raw = encode_node(obj)
        objects[cid] = raw
        return cid

    return emit


def build_buckets(entries: Iterable[TreeEntry], emit: Emit) -> list[Summary]:
    """The level-``BUCKET_LEVEL - 1`` nodes over ``entries`` (strictly ascending by key), every
    node below them handed to ``emit``; one summary per bucket."""
    summaries: list[Summary] = []
    chunk: list[TreeEntry] = []
    lanes: tuple[int, ...] = (0,) * 8
    prev: bytes | None = None
    for e in entries:
        if prev is not None and e.key <= prev:
            raise ValueError("tree entries must be strictly ascending by key")
        prev = e.key
        chunk.append(e)
        lanes = _add(lanes, lanes_of(e.key))
        level = key_level(e.key)
        if level >= 1:
            summaries.append(_leaf(chunk, lanes, level, emit))
            chunk, lanes = [], (0,) * 8
    if chunk:
        summaries.append(_leaf(chunk, lanes, 0, emit))
    for level in range(1, BUCKET_LEVEL):
        summaries = _group(summaries, level, emit)
    return summaries


def join_buckets(summaries: list[Summary], emit: Emit) -> tuple[str, Sha256a]:
    """(root cid, Sha256a of everything) over the bucket nodes, in key order."""
    if not summaries:
        return emit({"level": 0, "keys": []}), Sha256a()
    for a, b in itertools.pairwise(summaries):
        if b.first <= a.last:
            raise ValueError("tree buckets must be strictly ascending by key")
    level = BUCKET_LEVEL
    while len(summaries) > 1:
        summaries = _group(summaries, level, emit)
        level += 1
        if level > _MAX_LEVEL + 1 and len(summaries) > 1:
            # Every key closes at most _MAX_LEVEL levels: above that, group everything.
            summaries = [_parent(summaries, level, emit)]
    root = summaries[0]
    return root.cid, Sha256a(root.lanes, root.count)


def build_tree(entries: Iterable[TreeEntry]) -> tuple[str, dict[str, bytes], Sha256a]:
    """(root cid, {cid: node bytes}, Sha256a of everything) over entries sorted by key."""
    objects: dict[str, bytes] = {}
    emit = object_emitter(objects)
    root, ahash = join_buckets(build_buckets(entries, emit), emit)
    return root, objects, ahash


def _leaf(chunk: list[TreeEntry], lanes: tuple[int, ...], level: int, emit: Emit) -> Summary:
    cid = emit({"level": 0, "keys": [
        {"key": e.key.hex(), "file": e.file, "item": e.item} for e in chunk]})
    return Summary(chunk[0].key, chunk[-1].key, lanes, len(chunk), cid, level)


def _group(summaries: list[Summary], level: int, emit: Emit) -> list[Summary]:
    parents: list[Summary] = []
    group: list[Summary] = []
    for s in summaries:
        group.append(s)
        if s.closes > level:
            parents.append(_parent(group, level, emit))
            group = []
    if group:
        parents.append(_parent(group, level, emit))
    return parents


def _parent(group: list[Summary], level: int, emit: Emit) -> Summary:
    lanes: tuple[int, ...] = (0,) * 8
    for s in group:
        lanes = _add(lanes, s.lanes)
    cid = emit({"level": level, "children": [s.entry() for s in group]})
    return Summary(group[0].first, group[-1].last, lanes, sum(s.count for s in group), cid,
                    group[-1].closes)
