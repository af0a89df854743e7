"""Verifying fetched events: in the ingest worker processes, or in worker threads when there
are none."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from node.replication.ingest import IngestPool, IngestUnavailable
from sync.errors import RemoteProtocolError
from sync.ingest import VerifiedBatch
from sync.sds import SignedEvent, decode_event

__all__ = ["MAX_EVENT_BYTES", "VERIFY_THREADS", "Decoder", "PendingBatch", "verify_batch",
           "verify_in_threads"]

MAX_EVENT_BYTES = 1 << 20
VERIFY_THREADS = 2

Decoder = Callable[[bytes], SignedEvent]


def _default_decode(wire: bytes) -> SignedEvent:
    return decode_event(wire, max_size=MAX_EVENT_BYTES)


def _decode_all(wires: list[bytes], decode: Decoder = _default_decode
                ) -> list[SignedEvent | None]:
    out: list[SignedEvent | None] = []
    for wire in wires:
        try:
            out.append(decode(wire))
        except RemoteProtocolError:
            out.append(None)
    return out


async def verify_in_threads(wires: list[bytes], threads: int = VERIFY_THREADS,
                            decode: Decoder = _default_decode) -> list[SignedEvent | None]:
    """Decode and verify events (id and signature, or what the channel's SDS profile asks
    for) in worker threads: libsodium releases the GIL, so a batch is verified on every core
    while the event loop keeps serving."""
    if len(wires) < 64:
        return _decode_all(wires, decode)
    step = -(-len(wires) // threads)
    parts: list[list[SignedEvent | None]] = [[] for _ in range(threads)]

    async def run(i: int) -> None:
        parts[i] = await trio.to_thread.run_sync(_decode_all, wires[i * step : (i + 1) * step],
                                                 decode)

    async with trio.open_nursery() as nursery:
        for i in range(threads):
            nursery.start_soon(run, i)
    return [event for part in parts for event in part]


@dataclass
class PendingBatch:
    """A batch being verified (in worker processes, or threads without them)."""

    done: trio.Event = field(default_factory=trio.Event)
    result: VerifiedBatch | list[SignedEvent | None] = field(default_factory=list)
    error: BaseException | None = None


async def verify_batch(wires: list[bytes], pending: PendingBatch, ingest: IngestPool | None,
                       decode: Decoder = _default_decode) -> None:
    """Verify ``wires`` into ``pending`` (set ``done`` whatever happens): by the ingest
    workers when there are some, else in threads."""
    try:
        if not wires:  # an empty answer (the peer withheld everything): nothing to check
            pending.result = VerifiedBatch()
        elif ingest is not None:
            pending.result = await ingest.verify(wires)
        else:
            pending.result = await verify_in_threads(wires, decode=decode)
    except IngestUnavailable as exc:
        pending.error = exc
    finally:
        pending.done.set()
