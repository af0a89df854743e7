"""Checking a snapshot directory before its events enter a node: the manifest's chain, each
record file with its signature file and sidecars, and every event re-verified from its signed
wire bytes (used by :mod:`node.snapshots.bootstrap` and its worker processes)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from node.snapshots.precheck import BootstrapError, open_manifest
from storage import EventRecord, record_problem
from sync.errors import RemoteProtocolError
from sync.recordstream import (
    DEFAULT_LIMITS,
    RECORD_SUFFIX,
    SIGNATURE_SUFFIX,
    decode_record_file,
    decode_syncnode_record,
    verify_tree,
)
from sync.sds.profile import decode_event_by_channel
from sync.snapshot_manifest import FileEntry, Manifest
from sync.stored_event import record_of_event

__all__ = ["BootstrapError", "entry_problems", "fail", "file_events", "manifest_problems",
           "open_manifest", "read_entry", "verify_snapshot"]

_MAX_FILES = 1_000_000


def read_entry(snapshot: Path, entry: FileEntry) -> dict[str, bytes]:
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


def entry_problems(entry: FileEntry, files: dict[str, bytes]) -> list[str]:
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


def manifest_problems(snapshot: Path, manifest: Manifest) -> list[str]:
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


def fail(problems: list[str]) -> None:
    if problems:
        raise BootstrapError("snapshot verification failed: " + "; ".join(problems[:20]))


def verify_snapshot(snapshot: Path) -> Manifest:
    """The manifest, after every check passed (else ``BootstrapError``). Files are read and
    checked one record file (with its signature and sidecars) at a time: memory does not grow
    with the snapshot. Each file must be signed by the node key, verify on its own (items,
    running hash, sidecars) and be the file its manifest entry describes (file, start and end
    hash); the entries must chain (start = previous end, block + 1)."""
    manifest = open_manifest(snapshot)
    fail(manifest_problems(snapshot, manifest))
    for entry in manifest.files:
        fail(entry_problems(entry, read_entry(snapshot, entry)))
    return manifest


def file_events(path: str, data: bytes, network_id: int, layout: str,
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
