"""The node's driver answers what a bounded SDS channel asks of its log (``DeliveredReads``):
on real SQLite, events fetched one by one (the fetch path: ``ingest_reads`` answered first,
then ``ingest_batch``) fill a channel past its in-memory window; old copies fetched again are
recognised through the database, read in a worker thread between steps (never inside one),
and the channel restored from the saved state asks its questions before it is rebuilt."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import event

from node.clock import SystemClock
from node.replication import ChannelService
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from storage import count_events, make_engine, upgrade
from sync.identity import peer_id_of
from sync.sds import SdsChannel, SdsConfig
from tests.harness.channels import restored_channel_service

CONFIG = SdsConfig(bloom_capacity=16, sync_history_size=4, delivered_window=64)
T0 = 1_700_000_000.0


async def _service(store: EventStore, metrics: Metrics) -> ChannelService:
    key = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32)
    return await restored_channel_service(store, metrics, key, SystemClock(), CONFIG)


@pytest.mark.trio
async def test_a_bounded_channel_is_answered_from_sqlite(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'node.db'}")
    upgrade(engine)
    other = Ed25519PrivateKey.from_private_bytes(b"\x09" * 32)
    peer = SdsChannel("c", peer_id_of(other), other, CONFIG, random.Random(2), T0)
    wires = [peer.send(f"e{n}".encode(), T0 + n / 10) for n in range(150)]
    metrics = Metrics()
    store = EventStore(engine)
    on_trio_thread: list[str] = []  # SQL run on the event loop's thread: inside a step

    def note(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if threading.current_thread() is threading.main_thread():
            on_trio_thread.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run_writer)
        service = await _service(store, metrics)
        ch = service.channels["c"]
        now = T0 + 20
        for wire in wires:
            assert await service.fetched.ingest(wire, "peer", now=now) is not None
        await store.append([])  # what was queued is committed
        assert len(ch.layers.log) == CONFIG.delivered_window
        asked = metrics.total("sds_store_lookups_total")
        delivered = metrics.total("events_delivered_total")
        assert delivered == 150
        # The oldest, long out of memory: only the database knows them; not delivered again.
        for wire in wires[:10]:
            await service.fetched.ingest(wire, "peer", now=now)
        await store.append([])
        assert metrics.total("sds_store_lookups_total") > asked
        assert metrics.total("events_delivered_total") == delivered
        assert on_trio_thread == []
        assert await store.read(count_events, "c") == 150
        await service.save_state(all_channels=True)
        # Restored from its state and the newest part of its log: still bounded, still right.
        fresh = Metrics()
        again = await _service(store, fresh)
        assert len(again.channels["c"].layers.log) == CONFIG.delivered_window
        await again.fetched.ingest(wires[0], "peer", now=now)
        assert fresh.total("events_delivered_total") == 0
        assert fresh.total("sds_store_lookups_total") > 0
        await store.close()
