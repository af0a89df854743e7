"""Loading a node's log from a snapshot directory (record stream files + manifest).

- :func:`bootstrap` (``syncnode bootstrap --from-snapshot DIR``): verify every file (signatures,
  running-hash chain, sidecars) and the manifest's chain, re-verify every event (digest and
  sender signature) and recompute its Recon key with this node's network id, then bulk-load the
  events into an EMPTY database (files verified in worker processes, one transaction per
  file: :mod:`node.snapshots.load`). Recon fetches whatever came later. Events of a channel
  this node does not replicate are verified, left out and reported (``left_out``); the loaded
  keys plus those left out must still hash to the manifest's root.
- :func:`pull` (``syncnode snapshot pull DIR``): sync a database that already holds part of the
  log against the snapshot's range tree (CIP-124 appendix C): a subtree whose Sha256a and count
  equal the local range's is skipped, and only the missing events of differing leaves are read
  from their record files, verified and appended.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, delete

from node.snapshots.load import LeftOut, default_workers, load_files, trusted_file_events
from node.snapshots.trust import LoadRules, load_rules
from node.snapshots.verify import (
    BootstrapError,
    fail,
    manifest_problems,
    open_manifest,
    verify_snapshot,
)
from storage import (
    EventRecord,
    append_events,
    count_events,
    events,
    existing_keys,
    range_hash,
    write_transaction,
)
from storage.snapshot_files import read_object
from sync.errors import RemoteProtocolError
from sync.recon.eventid import CIP124_DRAFT, network_bounds
from sync.recon.sha256a import Sha256a
from sync.snapshot_manifest import Manifest, leaf_entries

__all__ = ["BootstrapError", "BootstrapResult", "LoadRules", "PullResult", "bootstrap",
           "load_rules", "pull", "verify_snapshot"]


@dataclass(frozen=True)
class BootstrapResult:
    events: int
    files: int
    running_hash: str
    seconds: float
    #: channel -> events of it left out (a channel this node does not replicate).
    left_out: dict[str, int] = field(default_factory=dict)


@dataclass
class PullResult:
    fetched: int = 0
    nodes_read: int = 0
    subtrees_skipped: int = 0
    files_read: set[str] = field(default_factory=set)
    #: channel -> events of it left out (a channel this node does not replicate).
    left_out: dict[str, int] = field(default_factory=dict)


def bootstrap(engine: Engine, snapshot: Path, network_id: int, layout: str = CIP124_DRAFT,
              profiles: Mapping[str, str] | None = None, *, rules: LoadRules,
              workers: int | None = None) -> BootstrapResult:
    """Verify ``snapshot`` and load it into the empty database behind ``engine``; events are
    checked under their channel's SDS profile (``profiles``, default "syncnode"), every file
    must be signed by one of ``rules.signers`` and every event meet ``rules.events``.
    ``workers`` processes verify the files (default: one per CPU; 0: all in this process)."""
    # A CLI tool (`syncnode snapshot bootstrap`) on a stopped node's database: no node clock.
    started = time.monotonic()
    manifest = open_manifest(snapshot)
    if manifest.network_id != network_id:
        raise BootstrapError(f"snapshot is of network {manifest.network_id}, "
                             f"this node is configured for network {network_id}")
    fail(manifest_problems(snapshot, manifest))
    with engine.connect() as conn:
        conn.execution_options(sqlite_immediate=True)
        with conn.begin():
            if count_events(conn) != 0:
                raise BootstrapError("the node database is not empty; bootstrap needs an empty "
                                     "one (use `syncnode snapshot pull` to sync a partial log)",
                                     input_error=False)
        # Each file is verified (in a worker) just before its events are loaded, one
        # transaction per file; a failure later on deletes what was loaded, so nothing of a
        # bad snapshot stays. A bootstrap killed half-way leaves a partial log, which
        # `syncnode snapshot pull` completes from the same snapshot.
        left_out: LeftOut = {}
        loaded = load_files(conn, snapshot, list(manifest.files), network_id, layout,
                            profiles or {}, int(time.time() * 1000),
                            default_workers() if workers is None else workers, rules, left_out)
        try:
            with conn.begin():
                _check_total(conn, manifest, network_id, sum(left_out.values(), Sha256a()))
        except BootstrapError:
            with conn.begin():
                conn.execute(delete(events))
            raise
    return BootstrapResult(loaded, len(manifest.files), manifest.chain.running_hash,
                           round(time.monotonic() - started, 3),
                           {channel: keys.count for channel, keys in sorted(left_out.items())})


def _check_total(conn: Connection, manifest: Manifest, network_id: int, left_out: Sha256a
                 ) -> None:
    """The loaded keys and those left out must hash to the manifest's tree root (else the
    transaction rolls back)."""
    have = range_hash(conn, *network_bounds(network_id)) + left_out
    if (have.hex(), have.count) != (manifest.ahash, manifest.count):
        raise BootstrapError(f"loaded events hash to {have.hex()} ({have.count} events, "
                             f"{left_out.count} of them left out), the manifest says "
                             f"{manifest.ahash} ({manifest.count})")


# A record file read by ``pull``: its loadable events by Recon key, and the keys left out (a
# channel this node does not replicate) with their channel.
_FileEvents = tuple[dict[bytes, EventRecord], dict[bytes, str]]


def _range_of(child: dict[str, Any]) -> tuple[bytes, bytes]:
    # [first, last] inclusive as a half-open range: the next byte string after ``last``.
    return bytes.fromhex(child["first"]), bytes.fromhex(child["last"]) + b"\x00"


def pull(engine: Engine, snapshot: Path, network_id: int, layout: str = CIP124_DRAFT,
         profiles: Mapping[str, str] | None = None, *, rules: LoadRules) -> PullResult:
    """Fetch from ``snapshot`` only the events whose ranges differ from the local log; a file
    is read only when signed by one of ``rules.signers``, and every event it gives must meet
    ``rules.events`` (else ``BootstrapError`` and nothing of that leaf is stored)."""
    manifest = open_manifest(snapshot)
    if manifest.network_id != network_id:
        raise BootstrapError(f"snapshot is of network {manifest.network_id}, not {network_id}")
    result = PullResult()
    decoded: dict[int, _FileEvents] = {}
    stack = [manifest.root] if manifest.root else []
    while stack:
        try:
            node = read_object(snapshot, stack.pop())
        except (RemoteProtocolError, OSError) as exc:
            raise BootstrapError(f"{snapshot}: {exc}") from None
        result.nodes_read += 1
        if node.get("level") == 0:
            _pull_leaf(engine, snapshot, manifest, node, network_id, layout, profiles or {},
                       decoded, result, rules)
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
               decoded: dict[int, _FileEvents],
               result: PullResult, rules: LoadRules) -> None:
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
            entry = manifest.files[e.file]
            kept, skipped = trusted_file_events(snapshot, entry, network_id, layout,
                                                profiles, rules)
            decoded[e.file] = ({record.recon_key: record for record in kept},
                               {key: channel for channel, keys in skipped.items()
                                for key in keys})
            result.files_read.add(entry.path)
        records, left_out = decoded[e.file]
        if (record := records.get(e.key)) is not None:
            wanted.append(record)
        elif (channel := left_out.get(e.key)) is not None:
            result.left_out[channel] = result.left_out.get(channel, 0) + 1
        else:
            raise BootstrapError(f"tree entry {e.key.hex()} is not an event of its file "
                                 f"(item {e.item})")
    if wanted:
        with write_transaction(engine) as conn:
            # `syncnode snapshot pull`, a CLI tool in a worker thread: no node clock.
            append_events(conn, wanted, int(time.time() * 1000))
        result.fetched += len(wanted)
