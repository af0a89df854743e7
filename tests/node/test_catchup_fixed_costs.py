"""What a small catch-up pays besides its per-event work (issue 37: a restarted peer's burst
of ~900 events must be taken in at the fresh-node rate, so waits of tens of milliseconds per
session matter): the recent events SDS's full step delivers from a fetched batch are committed
as soon as the store is free, not gathered like relayed gossip; a small answer (the first of a
fetch) is verified at once, not queued for an ingest worker process. Real SQLite, a real
ingest pool."""

from __future__ import annotations

import random
from pathlib import Path

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.replication.ingest import IngestPool
from node.replication.verify import MIN_THREADED, PendingBatch, verify_batch
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from storage import count_events, make_engine, upgrade
from sync.identity import peer_id_of
from sync.ingest import IngestSpec, verify_wires
from sync.sds import SdsChannel, encode_event
from tests.harness.channels import restored_channel_service
from tests.harness.cluster import until
from tests.sync.sds.helpers import channel, key

T0 = 1_700_000_000.0
#: Far beyond any scheduling delay: only a commit that does not gather can beat it.
GATHER_MS = 60_000


def test_recent_fetched_events_are_committed_without_the_relayed_gathering(
        tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'node.db'}")
    upgrade(engine)
    other = Ed25519PrivateKey.from_private_bytes(b"\x09" * 32)
    peer = SdsChannel("c", peer_id_of(other), other, None, random.Random(2), T0)
    wires = [peer.send(f"e{n}".encode(), T0 + n / 100) for n in range(20)]
    own = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32)

    async def main() -> None:
        metrics = Metrics()
        store = EventStore(engine, max_delay_ms=5, relayed_delay_ms=GATHER_MS)
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_writer)
            service = await restored_channel_service(store, metrics, own, SystemClock())
            # A second after they were sent: recent, so SDS's full step delivers them (its
            # bulk path takes only events older than its live window).
            for wire in wires:
                assert await service.fetched.ingest(wire, "peer", now=T0 + 1) is not None
            assert metrics.total("events_delivered_total") == len(wires)
            # Gathered like gossip, they would wait a minute.
            await until(lambda: _all_stored(store, len(wires)), 10, "not committed")
            nursery.cancel_scope.cancel()

    trio.run(main)
    engine.dispose()


async def _all_stored(store: EventStore, count: int) -> bool:
    return bool(await store.read(count_events, "c") >= count)


def test_a_small_answer_is_verified_without_waiting_for_a_worker() -> None:
    """A pool whose workers never start: a batch below ``MIN_THREADED`` is verified all the
    same (on the trio thread), as the rules say (``verify_wires``); a larger one still goes
    to the workers."""
    sender = channel(1).setup.participant_id
    wires = [encode_event("general", sender, 1000 + i, (), f"e{i}".encode(), key(1)).wire
             for i in range(MIN_THREADED - 1)]
    spec = IngestSpec(network_id=7)
    pool = IngestPool(spec, 1, Metrics(), SystemClock())  # never run

    async def main() -> PendingBatch:
        pending = PendingBatch()
        with trio.fail_after(10):  # the pool's start timeout is 30 s
            await verify_batch(wires, pending, pool, spec)
        return pending

    pending = trio.run(main)
    assert pending.error is None
    assert pending.result.message_ids == verify_wires(spec, wires).message_ids
    assert len(pending.result.keys) == len(wires) and not pending.result.rejected
