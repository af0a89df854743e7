"""Verifying fetched events: in the ingest worker processes, or in worker threads when there
are none. Either way the result is one ``sync.ingest.VerifiedBatch`` (``verify_wires``), so
what follows is the same one ingest path: where the CPU work runs is the driver's choice, not a
second copy of the rules."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from node.replication.ingest import IngestPool, IngestUnavailable
from sync.ingest import IngestSpec, VerifiedBatch, verify_wires

__all__ = ["MAX_EVENT_BYTES", "MIN_THREADED", "VERIFY_THREADS", "PendingBatch", "verify_batch",
           "verify_in_threads"]

MAX_EVENT_BYTES = 1 << 20
VERIFY_THREADS = 2
# Batches smaller than this are verified on the trio thread: a thread hop (or a worker
# process's round trip) costs more.
MIN_THREADED = 64


async def verify_in_threads(wires: list[bytes], spec: IngestSpec,
                            threads: int = VERIFY_THREADS) -> VerifiedBatch:
    """Decode and verify events (id and signature, or what the channel's SDS profile asks
    for) in worker threads: libsodium releases the GIL, so a batch is verified on every core
    while the event loop keeps serving."""
    if len(wires) < MIN_THREADED:
        return verify_wires(spec, wires)
    step = -(-len(wires) // threads)
    parts: list[VerifiedBatch] = [VerifiedBatch() for _ in range(threads)]

    async def run(i: int) -> None:
        parts[i] = await trio.to_thread.run_sync(verify_wires, spec,
                                                 wires[i * step : (i + 1) * step])

    async with trio.open_nursery() as nursery:
        for i in range(threads):
            nursery.start_soon(run, i)
    out = parts[0]
    for part in parts[1:]:
        out.extend(part)
    return out


@dataclass
class PendingBatch:
    """A batch being verified (in worker processes, or threads without them)."""

    done: trio.Event = field(default_factory=trio.Event)
    result: VerifiedBatch = field(default_factory=VerifiedBatch)
    error: BaseException | None = None


async def verify_batch(wires: list[bytes], pending: PendingBatch, ingest: IngestPool | None,
                       spec: IngestSpec) -> None:
    """Verify ``wires`` into ``pending`` (set ``done`` whatever happens): by the ingest
    workers when there are some, else in threads; a batch of fewer than ``MIN_THREADED`` on
    the trio thread either way (a worker's round trip, a pipe each way and a process to wake
    on a busy machine, took 20-60 ms for the first answer of a catch-up, against ~5 ms of
    CPU here)."""
    try:
        if not wires:  # an empty answer (the peer withheld everything): nothing to check
            pending.result = VerifiedBatch()
        elif ingest is not None and len(wires) >= MIN_THREADED:
            pending.result = await ingest.verify(wires)
        else:
            pending.result = await verify_in_threads(wires, spec)
    except IngestUnavailable as exc:
        pending.error = exc
    finally:
        pending.done.set()
