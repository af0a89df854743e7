"""The bootstrap's load: record files verified in worker processes, their rows bulk-inserted
by this one.

Verifying is most of a bootstrap's work (at 1,000,000 events: the Ed25519 check of every event
44% of the time, decoding and the file checks ~20%, the insert ~25%), and every file verifies
on its own, so ``workers`` processes each take one record file at a time (read it with its
signature file and sidecars, run every check of :mod:`node.snapshots.verify`, re-verify and
re-key every event) and hand back plain row tuples; this process inserts each file's rows in
manifest order (so ``seq`` follows consensus order), one transaction and one ``executemany``
per file. At most ``2 x workers`` files are in flight, so memory does not grow with the
snapshot however far the workers get ahead of the inserts.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, delete

from node.snapshots.trust import LoadRules, signer_problem
from node.snapshots.verify import BootstrapError, entry_problems, fail, file_events, read_entry
from storage import EventRecord, event_values, events, insert_values
from sync.recon.sha256a import Sha256a
from sync.snapshot_manifest import FileEntry

__all__ = ["FileTask", "LeftOut", "add_left_out", "default_workers", "file_rows", "load_files",
           "trusted_file_events"]

Rows = list[tuple[object, ...]]

# SQLite's page cache for the load (KiB; the default is 2 MiB): the unique indexes on the Recon
# key and the message id take random inserts, which stay in memory at tens of millions of rows.
_LOAD_CACHE_KIB = 256 * 1024
_DEFAULT_CACHE_KIB = 2000


@dataclass(frozen=True)
class FileTask:
    """One record file to verify and turn into rows (pickled to a worker)."""

    snapshot: str
    entry: FileEntry
    network_id: int
    layout: str
    profiles: Mapping[str, str]
    received_at: int
    rules: LoadRules


#: Per channel this node does not replicate: the Sha256a (and count) of the Recon keys of the
#: events a load left out of it (the loaded keys plus these must give the manifest's root).
LeftOut = dict[str, Sha256a]


def add_left_out(total: LeftOut, more: LeftOut) -> None:
    for channel, keys in more.items():
        total[channel] = total.get(channel, Sha256a()) + keys


def file_rows(task: FileTask) -> tuple[str | None, Rows, LeftOut]:
    """(why the file is refused, or None; its events' rows; what it left out): every check of
    the file, its signature file and sidecars, then every event re-verified from its signed
    bytes."""
    entry = task.entry
    try:
        records, skipped = trusted_file_events(Path(task.snapshot), entry, task.network_id,
                                               task.layout, task.profiles, task.rules)
        return (None, [event_values(record, task.received_at) for record in records],
                {channel: Sha256a.of(keys) for channel, keys in skipped.items()})
    except BootstrapError as exc:
        return str(exc), [], {}


def trusted_file_events(snapshot: Path, entry: FileEntry, network_id: int, layout: str,
                        profiles: Mapping[str, str], rules: LoadRules
                        ) -> tuple[list[EventRecord], dict[str, list[bytes]]]:
    """The events of one listed record file, after every check: the file's own (signature,
    chain, sidecars, manifest hashes), a trusted signer, and each event's ingest rules; and,
    per channel this node does not replicate, the Recon keys of its events, left out (each
    still verified: a forged event refuses the file whatever its channel)."""
    fail([p for p in [signer_problem(entry.path, rules.signers)] if p])
    files = read_entry(snapshot, entry)
    fail(entry_problems(entry, files))
    kept: list[EventRecord] = []
    skipped: dict[str, list[bytes]] = {}
    for record in file_events(entry.path, files[entry.path], network_id, layout, profiles):
        if rules.replicates(record.channel):
            rules.check(entry.path, record)
            kept.append(record)
        else:
            skipped.setdefault(record.channel, []).append(record.recon_key)
    return kept, skipped


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def _verified(tasks: list[FileTask], workers: int
              ) -> Iterator[tuple[str | None, Rows, LeftOut]]:
    """``file_rows`` of each task, in order; ``workers`` = 0: in this process."""
    if workers <= 0:
        yield from map(file_rows, tasks)
        return
    # fork: the workers need nothing but this module's functions, and a spawned worker would
    # re-import the caller's __main__ (a script calling bootstrap() at its top level).
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        pending: deque[Future[tuple[str | None, Rows, LeftOut]]] = deque()
        todo = iter(tasks)
        try:
            for task in todo:
                pending.append(pool.submit(file_rows, task))
                if len(pending) >= 2 * workers:
                    break
            while pending:
                result = pending.popleft().result()
                for task in todo:
                    pending.append(pool.submit(file_rows, task))
                    break
                yield result
        finally:
            for future in pending:
                future.cancel()


def load_files(conn: Connection, snapshot: Path, entries: list[FileEntry], network_id: int,
               layout: str, profiles: Mapping[str, str], received_at: int,
               workers: int, rules: LoadRules, left_out: LeftOut) -> int:
    """Verify and insert every file of ``entries`` into the empty log behind ``conn`` (not in a
    transaction); the number of events loaded (``left_out`` gets what was not). On any failure
    every loaded row is deleted again before the error propagates: nothing of a bad snapshot
    stays."""
    tasks = [FileTask(str(snapshot), e, network_id, layout, dict(profiles), received_at, rules)
             for e in entries]
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        conn.exec_driver_sql(f"PRAGMA cache_size=-{_LOAD_CACHE_KIB}")
        conn.commit()
    loaded = 0
    try:
        for problem, rows, skipped in _verified(tasks, workers):
            if problem is not None:
                raise BootstrapError(problem)
            add_left_out(left_out, skipped)
            with conn.begin():
                insert_values(conn, rows)
            loaded += len(rows)
    except BaseException:
        if conn.in_transaction():
            conn.rollback()
        if loaded:
            with conn.begin():
                conn.execute(delete(events))
        raise
    finally:
        if sqlite:
            conn.exec_driver_sql(f"PRAGMA cache_size=-{_DEFAULT_CACHE_KIB}")
            conn.commit()
    return loaded
