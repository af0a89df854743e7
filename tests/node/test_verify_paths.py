"""Where fetched events are verified is a driver's choice, not a second copy of the rules:
worker threads and an ingest worker process give the same ``VerifiedBatch`` (the one ingest
path then takes it), rejections with their kinds included."""

from __future__ import annotations

import trio

from node.clock import SystemClock
from node.replication.ingest import IngestPool
from node.replication.verify import MAX_EVENT_BYTES, verify_in_threads
from node.telemetry.metrics import Metrics
from sync.errors import ErrorKind
from sync.ingest import IngestSpec, VerifiedBatch, verify_wires
from sync.sds import encode_event
from tests.sync.sds.helpers import channel, key

SPEC = IngestSpec(network_id=7, max_event_bytes=MAX_EVENT_BYTES)


def columns(b: VerifiedBatch) -> tuple[object, ...]:
    return (b.message_ids, b.channels, b.senders, b.lamports, b.keys, b.lanes, b.histories,
            b.has_content, b.canonical, b.rejected, b.rejected_kinds)


def test_threads_and_a_worker_process_verify_alike() -> None:
    sender = channel(1).setup.participant_id
    wires = [encode_event("general", sender, 1000 + i, (), f"e{i}".encode(), key(1)).wire
             for i in range(70)]  # over the threaded minimum
    wires[3] = wires[3].replace(b"e3", b"E3")  # no longer what was signed
    wires[5] = b"\xff\xfe not protobuf"

    async def main() -> tuple[VerifiedBatch, VerifiedBatch]:
        threaded = await verify_in_threads(wires, SPEC)
        pool = IngestPool(SPEC, 1, Metrics(), SystemClock())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pool.run)
            in_process = await pool.verify(wires)
            nursery.cancel_scope.cancel()
        return threaded, in_process

    threaded, in_process = trio.run(main)
    assert columns(threaded) == columns(in_process) == columns(verify_wires(SPEC, wires))
    assert set(threaded.rejected) == {3, 5}
    assert threaded.rejected_kinds[5] is ErrorKind.UNDECODABLE
