"""The ingest worker process (``python -m node.ingest_worker``), started by
``node.replication.ingest``.

It reads length-prefixed pickled frames on stdin: first an ``IngestSpec``, then requests
``(request_id, wires)``; for each it writes ``(request_id, VerifiedBatch)`` on stdout. The
frames come only from its own daemon (never from a peer: peers' bytes reach it inside the
``wires`` list and are only ever parsed as protobuf).

It never outlives the daemon: it exits when stdin closes (the daemon exited or closed it) and
asks Linux to kill it when the daemon's thread that started it dies (``PR_SET_PDEATHSIG``),
so even a daemon killed with SIGKILL leaves no worker behind.

It lives at the top of ``node`` (not in ``node.replication`` with the pool) so that starting it
imports only ``sync``: ~30 MiB per worker instead of the daemon's ~110 MiB of libp2p, trio
and SQLAlchemy.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import struct
import sys
from typing import BinaryIO

from sync.ingest import IngestSpec, verify_wires

__all__ = ["main", "read_frame", "write_frame"]

_LEN = struct.Struct(">I")
_PR_SET_PDEATHSIG = 1


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
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the daemon died before the request above took effect
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
    while (frame := read_frame(source)) is not None:
        request_id, wires = pickle.loads(frame)
        write_frame(sink, pickle.dumps((request_id, verify_wires(spec, wires)),
                                       protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
