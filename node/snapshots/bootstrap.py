"""Loading a node's log from a snapshot directory (record stream files + manifest).

- :func:`bootstrap` (``syncnode bootstrap --from-snapshot DIR``): verify every file (signatures,
  running-hash chain, sidecars) and the manifest's chain, re-verify every event (digest and
  sender signature) and recompute its Recon key with this node's network id, then bulk-load all
  events into an EMPTY database in one transaction. Recon fetches whatever came later.
- :func:`pull` (``syncnode snapshot pull DIR``): sync a database that already holds part of the
  log against the snapshot's range tree (CIP-124 appendix C): a subtree whose Sha256a and count
  equal the local range's is skipped, and only the missing events of differing leaves are read
  from their record files, verified and appended.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine

from storage import (
    EventRecord,
    append_events,
    count_events,
    event_row,
    existing_keys,
    insert_rows,
    range_hash,
    record_problem,
    write_transaction,
)
from storage.snapshot_files import load_manifest, read_object
from sync.errors import RemoteProtocolError
from sync.recon.eventid import CIP124_DRAFT, network_bounds
from sync.recordstream import (
    DEFAULT_LIMITS,
    RECORD_SUFFIX,
    SIGNATURE_SUFFIX,
    decode_record_file,
    decode_syncnode_record,
    verify_tree,
)
from sync.sds.profile import decode_event_by_channel
from sync.snapshot_manifest import (
    FileEntry,
    Manifest,
    leaf_entries,
)
from sync.stored_event import record_of_event

__all__ = ["BootstrapError", "BootstrapResult", "PullResult", "bootstrap", "pull",
           "verify_snapshot"]

_BATCH = 5_000
_MAX_FILES = 1_000_000


class BootstrapError(Exception):
    """The snapshot or the target database is unusable; the message says why.

    ``input_error``: the snapshot itself is at fault (malformed, fails verification, another
    network), as opposed to the database (not empty, unreachable).
    """

    def __init__(self, message: str, *, input_error: bool = True) -> None:
        self.input_error = input_error
        super().__init__(message)


@dataclass(frozen=True)
class BootstrapResult:
    events: int
    files: int
    running_hash: str
    seconds: float


@dataclass
class PullResult:
    fetched: int = 0
    nodes_read: int = 0
    subtrees_skipped: int = 0
    files_read: set[str] = field(default_factory=set)


def _read_entry(snapshot: Path, entry: FileEntry) -> dict[str, bytes]:
    """One record file of the manifest with its signature file and sidecars (size-limited)."""
    files: dict[str, bytes] = {}
    for rel in (entry.path, entry.signature, *entry.sidecars):
        path = snapshot / rel
        if not path.is_file() or snapshot.resolve() not in path.resolve().parents:
            continue  # missing (reported by the checks below) or outside the snapshot
        limit = (DEFAULT_LIMITS.max_signature_file if rel.endswith(SIGNATURE_SUFFIX)
                 else DEFAULT_LIMITS.max_compressed)
        with path.open("rb") as fh:
            files[rel] = fh.read(limit + 1)
    return files


def _entry_problems(entry: FileEntry, files: dict[str, bytes]) -> list[str]:
    """Everything wrong with one listed file: ``verify_tree`` over it, its signature file and
    sidecars, and whether it is the file the manifest describes (hashes)."""
    if entry.path not in files:
        return [f"{entry.path}: listed in the manifest but missing"]
    report = verify_tree(files, None)
    problems = [f"{r.path}: {c.name}: {c.detail}" for r in report.files for c in r.failures()]
    statuses = {c.name: c.status for r in report.files if r.kind == "signature"
                for c in r.checks}
    if statuses.get("file_signature") != "ok" or statuses.get("metadata_signature") != "ok":
        problems.append(f"{entry.path}: no valid signature by the node key")
    hashes = {k: v for r in report.files if r.path == entry.path for k, v in r.hashes}
    if hashes and (hashes.get("file"), hashes.get("start"), hashes.get("end")) != (
            entry.file_hash, entry.start_running_hash, entry.end_running_hash):
        problems.append(f"{entry.path}: differs from its manifest entry (hashes)")
    return problems


def _manifest_problems(snapshot: Path, manifest: Manifest) -> list[str]:
    """The manifest's own chain, and record files on disk it does not list (names only)."""
    problems: list[str] = []
    previous_end, block = None, None
    for entry in manifest.files:
        if previous_end is not None and entry.start_running_hash != previous_end:
            problems.append(f"{entry.path}: does not continue the previous file's running hash")
        if block is not None and entry.block != block + 1:
            problems.append(f"{entry.path}: block {entry.block} does not follow {block}")
        previous_end, block = entry.end_running_hash, entry.block
    if manifest.files and manifest.chain.running_hash != manifest.files[-1].end_running_hash:
        problems.append("manifest chain state differs from its last file's end running hash")
    listed = {e.path for e in manifest.files}
    for n, path in enumerate(snapshot.glob("record*/*" + RECORD_SUFFIX)):
        if n >= _MAX_FILES:
            problems.append(f"more than {_MAX_FILES} record files")
            break
        rel = path.relative_to(snapshot).as_posix()
        if rel not in listed:
            problems.append(f"{rel}: record file not in the manifest")
    return problems


def _fail(problems: list[str]) -> None:
    if problems:
        raise BootstrapError("snapshot verification failed: " + "; ".join(problems[:20]))


def _open_manifest(snapshot: Path) -> Manifest:
    try:
        manifest = load_manifest(snapshot)
    except RemoteProtocolError as exc:
        raise BootstrapError(f"{snapshot}: {exc}") from None
    if manifest is None:
        raise BootstrapError(f"{snapshot}: no manifest.json (not a snapshot directory)")
    return manifest


def verify_snapshot(snapshot: Path) -> Manifest:
    """The manifest, after every check passed (else ``BootstrapError``). Files are read and
    checked one record file (with its signature and sidecars) at a time: memory does not grow
    with the snapshot. Each file must be signed by the node key, verify on its own (items,
    running hash, sidecars) and be the file its manifest entry describes (file, start and end
    hash); the entries must chain (start = previous end, block + 1)."""
    manifest = _open_manifest(snapshot)
    _fail(_manifest_problems(snapshot, manifest))
    for entry in manifest.files:
        _fail(_entry_problems(entry, _read_entry(snapshot, entry)))
    return manifest


def _file_events(path: str, data: bytes, network_id: int, layout: str,
                 profiles: Mapping[str, str]) -> Iterator[EventRecord]:
    """The events of one record file, each re-verified from its signed wire bytes."""
    try:
        record_file = decode_record_file(data, path)
        for item in record_file.message.record_stream_items:
            event = decode_event_by_channel(item.transaction, profiles)
            info = decode_syncnode_record(item.record, path)
            if info is None or info.event.message_id != event.message_id:
                raise RemoteProtocolError("record does not describe its transaction", path)
            record = record_of_event(network_id, event, layout)
            problem = record_problem(record)
            if problem is not None:  # one such row would fail the whole load
                raise RemoteProtocolError(f"event {event.message_id}: {problem}", path)
            yield record
    except RemoteProtocolError as exc:
        raise BootstrapError(f"{path}: {exc}") from None


def bootstrap(engine: Engine, snapshot: Path, network_id: int, layout: str = CIP124_DRAFT,
              profiles: Mapping[str, str] | None = None) -> BootstrapResult:
    """Verify ``snapshot`` and load it into the empty database behind ``engine``; events are
    checked under their channel's SDS profile (``profiles``, default "syncnode")."""
    started = time.monotonic()
    manifest = _open_manifest(snapshot)
    if manifest.network_id != network_id:
        raise BootstrapError(f"snapshot is of network {manifest.network_id}, "
                             f"this node is configured for network {network_id}")
    now_ms = int(time.time() * 1000)
    loaded = 0
    with engine.begin() as conn:
        if count_events(conn) != 0:
            raise BootstrapError("the node database is not empty; bootstrap needs an empty one "
                                 "(use `syncnode snapshot pull` to sync a partial log)",
                                 input_error=False)
        batch: list[dict[str, object]] = []
        _fail(_manifest_problems(snapshot, manifest))
        # One pass: each file is verified just before its events are loaded; a failure later
        # on rolls the whole transaction back, so nothing of a bad snapshot stays.
        for entry in manifest.files:
            files = _read_entry(snapshot, entry)
            _fail(_entry_problems(entry, files))
            for record in _file_events(entry.path, files[entry.path], network_id, layout,
                                       profiles or {}):
                batch.append(event_row(record, now_ms))
                if len(batch) >= _BATCH:
                    insert_rows(conn, batch)
                    loaded, batch = loaded + len(batch), []
        insert_rows(conn, batch)
        loaded += len(batch)
        _check_total(conn, manifest, network_id)
    return BootstrapResult(loaded, len(manifest.files), manifest.chain.running_hash,
                           round(time.monotonic() - started, 3))


def _check_total(conn: Connection, manifest: Manifest, network_id: int) -> None:
    """The loaded keys must hash to the manifest's tree root (else the transaction rolls back)."""
    have = range_hash(conn, *network_bounds(network_id))
    if (have.hex(), have.count) != (manifest.ahash, manifest.count):
        raise BootstrapError(f"loaded events hash to {have.hex()} ({have.count} events), the "
                             f"manifest says {manifest.ahash} ({manifest.count})")


def _range_of(child: dict[str, Any]) -> tuple[bytes, bytes]:
    # [first, last] inclusive as a half-open range: the next byte string after ``last``.
    return bytes.fromhex(child["first"]), bytes.fromhex(child["last"]) + b"\x00"


def pull(engine: Engine, snapshot: Path, network_id: int, layout: str = CIP124_DRAFT,
         profiles: Mapping[str, str] | None = None) -> PullResult:
    """Fetch from ``snapshot`` only the events whose ranges differ from the local log."""
    manifest = _open_manifest(snapshot)
    if manifest.network_id != network_id:
        raise BootstrapError(f"snapshot is of network {manifest.network_id}, not {network_id}")
    result = PullResult()
    decoded: dict[int, list[EventRecord]] = {}
    stack = [manifest.root] if manifest.root else []
    while stack:
        try:
            node = read_object(snapshot, stack.pop())
        except (RemoteProtocolError, OSError) as exc:
            raise BootstrapError(f"{snapshot}: {exc}") from None
        result.nodes_read += 1
        if node.get("level") == 0:
            _pull_leaf(engine, snapshot, manifest, node, network_id, layout, profiles or {},
                       decoded, result)
            continue
        with engine.connect() as conn:
            for child in node["children"]:
                local = range_hash(conn, *_range_of(child))
                if (local.hex(), local.count) == (child["ahash"], child["count"]):
                    result.subtrees_skipped += 1
                else:
                    stack.append(child["cid"])
    return result


def _pull_leaf(engine: Engine, snapshot: Path, manifest: Manifest, node: dict[str, Any],
               network_id: int, layout: str, profiles: Mapping[str, str],
               decoded: dict[int, list[EventRecord]],
               result: PullResult) -> None:
    try:
        entries = leaf_entries(node)
    except RemoteProtocolError as exc:
        raise BootstrapError(f"{snapshot}: {exc}") from None
    with engine.connect() as conn:
        have = existing_keys(conn, [e.key for e in entries])
    wanted: list[EventRecord] = []
    for e in entries:
        if e.key in have:
            continue
        if not 0 <= e.file < len(manifest.files):
            raise BootstrapError(f"tree entry points at file {e.file}, the manifest has "
                                 f"{len(manifest.files)}")
        if e.file not in decoded:
            path = manifest.files[e.file].path
            with (snapshot / path).open("rb") as fh:
                data = fh.read(DEFAULT_LIMITS.max_compressed + 1)
            decoded[e.file] = list(_file_events(path, data, network_id, layout, profiles))
            result.files_read.add(path)
        items = decoded[e.file]
        if not 0 <= e.item < len(items) or items[e.item].recon_key != e.key:
            raise BootstrapError(f"tree entry {e.key.hex()} is not item {e.item} of its file")
        wanted.append(items[e.item])
    if wanted:
        with write_transaction(engine) as conn:
            append_events(conn, wanted, int(time.time() * 1000))
        result.fetched += len(wanted)
