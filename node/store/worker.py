"""The ingest worker process (``python -m node.store.worker``), started by
``node.replication.ingest``.

It reads length-prefixed pickled frames on stdin: first an ``IngestSpec``, then requests,
each answered on stdout in order:

- ``("verify", request_id, wires)`` -> ``(request_id, VerifiedBatch)``;
- ``("append", request_id, AppendRequest)`` -> ``(request_id, (AppendResult, errors))``: the
  worker appends the rows to the node's database in its own transaction
  (``storage.append_isolating``) and answers only after the commit. The daemon sends one only
  while it holds the store's write token (docs/bench/cluster.md, "the ingest worker as
  writer"), so the worker never races the daemon's writer for SQLite's lock.

The frames come only from its own daemon (never from a peer: peers' bytes reach it inside the
``wires`` list and are only ever parsed as protobuf).

It never outlives the daemon: it exits when stdin closes, which the kernel does when the
daemon exits however it dies (SIGKILL included), since only the daemon holds the pipe's other
end. (Not ``PR_SET_PDEATHSIG``: it fires when the *thread* that started the child ends, and trio
starts processes from its worker threads, which idle out: that killed healthy workers.)

It lives at the top of ``node`` (not in ``node.replication`` with the pool) so that starting it
imports only ``sync``: ~30 MiB per worker instead of the daemon's ~110 MiB of libp2p, trio
and SQLAlchemy. ``storage`` (SQLAlchemy, ~30 MiB more) is imported at the first append only.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from sync.ingest import IngestSpec, verify_wires

__all__ = ["AppendRequest", "main", "read_frame", "write_frame"]

_LEN = struct.Struct(">I")


def read_frame(stream: BinaryIO) -> bytes | None:
    """One frame, or None at end of input."""
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (size,) = _LEN.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def write_frame(stream: BinaryIO, body: bytes) -> None:
    stream.write(_LEN.pack(len(body)) + body)
    stream.flush()


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Rows to append, one list per column, in the order SDS delivered them (the log's order)."""

    db_url: str
    sqlite_synchronous: str
    received_at: int
    keys: Sequence[bytes]
    message_ids: Sequence[str]
    channels: Sequence[str]
    senders: Sequence[str]
    lamports: Sequence[int]
    wires: Sequence[bytes]
    lanes: Sequence[tuple[int, ...]]
    #: The writer connection's page cache (``storage.sqlite_writer_cache_mib``; 0: SQLite's).
    sqlite_cache_mib: int = 0


class _Writer:
    """The worker's database connection, opened at the first append (verify-only workers
    never import SQLAlchemy)."""

    def __init__(self) -> None:
        self._engines: dict[tuple[str, str, int], Any] = {}

    def append(self, request: AppendRequest) -> tuple[Any, dict[str, str]]:
        from storage import EventRecord, append_isolating, make_engine

        where = (request.db_url, request.sqlite_synchronous, request.sqlite_cache_mib)
        engine = self._engines.get(where)
        if engine is None:
            engine = make_engine(request.db_url, sqlite_synchronous=request.sqlite_synchronous,
                                 sqlite_cache_mib=request.sqlite_cache_mib)
            self._engines[where] = engine
        records = [EventRecord(*row) for row in zip(
            request.keys, request.message_ids, request.channels, request.senders,
            request.lamports, request.wires, request.lanes, strict=True)]
        return append_isolating(engine, records, request.received_at)


def _die_with_parent(parent: int) -> None:
    if os.getppid() != parent:  # the daemon died before we started: nobody to serve
        os._exit(1)


def main() -> int:
    if len(sys.argv) > 1:
        _die_with_parent(int(sys.argv[1]))
    # The daemon stops its workers itself; a Ctrl-C on the terminal must not print tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    first = read_frame(source)
    if first is None:
        return 0
    spec = pickle.loads(first)
    if not isinstance(spec, IngestSpec):
        print("ingest worker: the first frame must be an IngestSpec", file=sys.stderr)
        return 2
    writer = _Writer()
    try:
        while (frame := read_frame(source)) is not None:
            kind, request_id, body = pickle.loads(frame)
            answer: object
            if kind == "verify":
                answer = verify_wires(spec, body)
            elif kind == "append":
                answer = writer.append(body)
            else:
                print(f"ingest worker: unknown request {kind!r}", file=sys.stderr)
                return 2
            write_frame(sink, pickle.dumps((request_id, answer),
                                           protocol=pickle.HIGHEST_PROTOCOL))
    except BrokenPipeError:  # the daemon is gone
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
