"""The ingest worker process (``python -m node.ingest_worker``), started by
``node.replication.ingest``.

It reads length-prefixed pickled frames on stdin: first an ``IngestSpec``, then requests
``(request_id, wires)``; for each it writes ``(request_id, VerifiedBatch)`` on stdout. The
frames come only from its own daemon (never from a peer: peers' bytes reach it inside the
``wires`` list and are only ever parsed as protobuf).

It never outlives the daemon: it exits when stdin closes, which the kernel does when the
daemon exits however it dies (SIGKILL included), since only the daemon holds the pipe's other
end. (Not ``PR_SET_PDEATHSIG``: it fires when the *thread* that started the child ends, and trio
starts processes from its worker threads, which idle out: that killed healthy workers.)

It lives at the top of ``node`` (not in ``node.replication`` with the pool) so that starting it
imports only ``sync``: ~30 MiB per worker instead of the daemon's ~110 MiB of libp2p, trio
and SQLAlchemy.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
from typing import BinaryIO

from sync.ingest import IngestSpec, verify_wires

__all__ = ["main", "read_frame", "write_frame"]

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
    try:
        while (frame := read_frame(source)) is not None:
            request_id, wires = pickle.loads(frame)
            write_frame(sink, pickle.dumps((request_id, verify_wires(spec, wires)),
                                           protocol=pickle.HIGHEST_PROTOCOL))
    except BrokenPipeError:  # the daemon is gone
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
