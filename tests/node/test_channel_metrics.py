"""Each SDS counter on ``/metrics`` moves when its event happens: the node's channel service with
two real SDS channels (ours and a peer's) exchanging real signed messages, with chosen losses,
on a fake clock; the real event store on SQLite behind it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.p2p.run import open_host
from node.replication import CHANNEL_METRICS, ChannelService
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from storage import make_engine, upgrade
from sync.identity import peer_id_of
from sync.sds import SdsChannel, SdsConfig, decode_transmission
from tests.harness.channels import channel_service

CONFIG = SdsConfig(resend_interval=1.0, possibly_acked_resend_interval=3.0, max_resends=2,
                   lost_timeout=6.0, sync_interval=1.0, sync_jitter=0.5, t_min=0.2, t_max=0.4)
T0 = 1_000_000.0


@pytest.mark.trio
async def test_sds_events_move_their_counters(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'node.db'}")
    upgrade(engine)
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    metrics = Metrics()
    ours = SdsChannel("c", peer_id_of(key), key, CONFIG, random.Random(1), T0)
    async with open_host(key, clock=SystemClock()) as host:  # a gap asks whom it has
        service = channel_service(EventStore(engine), metrics, peer_id_of(key), {"c": ours},
                                  SystemClock(), host=host)
        await _exercise(service, ours, other, metrics)


async def _exercise(service: ChannelService, ours: SdsChannel, other: Ed25519PrivateKey,
                    metrics: Metrics) -> None:
    peer = SdsChannel("c", peer_id_of(other), other, CONFIG, random.Random(2), T0)
    now = T0

    def to_us(data: bytes) -> None:
        ours.receive(data, now, peer="peer")
        service.driver.carry_out(service.core.drain("c"))

    def run_until(end: float, *, deliver_to_peer: bool, deliver_to_us: bool) -> None:
        nonlocal now
        while now < end:
            now += 0.1
            from_peer: list[bytes] = []
            if (due := ours.get_timer()) is not None and due <= now:
                service.driver.carry_out(service.core.handle_timer(now))
            if (due := peer.get_timer()) is not None and due <= now:
                from_peer = peer.handle_timer(now)
            for data in from_peer:
                if deliver_to_us:
                    to_us(data)
            while True:
                try:
                    _name, data = service.driver.outbox._receive.receive_nowait()
                except Exception:
                    break
                if deliver_to_peer:
                    peer.receive(data, now, peer="us")

    # A: the peer's first message is lost, its second arrives: a missing dependency, repair
    # requests for it, and after lost_timeout the dependency is declared lost.
    peer.send(b"p1", now)
    peer.events()
    to_us(peer.send(b"p2", now))
    run_until(T0 + 10, deliver_to_peer=False, deliver_to_us=False)
    # B: our message never reaches the peer: resent, then given up.
    ours.send(b"own1", now)  # the returned wire is never gossiped
    service.driver.carry_out(service.core.drain("c"))
    run_until(now + 6, deliver_to_peer=False, deliver_to_us=False)
    # C: the peer gets our third message but not the second: it asks for a repair, we answer,
    # and its next messages acknowledge ours.
    ours.send(b"own2", now)  # lost on the way
    service.driver.carry_out(service.core.drain("c"))
    peer.receive(ours.send(b"own3", now), now, peer="us")
    service.driver.carry_out(service.core.drain("c"))
    run_until(now + 8, deliver_to_peer=True, deliver_to_us=True)
    peer.send(b"p3", now)
    run_until(now + 3, deliver_to_peer=True, deliver_to_us=True)

    # D: garbage from a peer is refused and counted by reason.
    assert await service.fetched.ingest(b"\x00 not an event", "peer", now=now) is None
    # E: an event fetched ahead of its dependency waits in the dependency buffer.
    peer.send(b"p4", now)  # never reaches us
    ahead = decode_transmission(peer.send(b"p5", now)).event
    assert await service.fetched.ingest(ahead.wire, "peer", now=now) == ahead.message_id

    moved = {name: metrics.total(name) for name in CHANNEL_METRICS}
    for name in ("sds_resends_total", "sds_fetched_waiting_total"):
        moved[name] = metrics.value(name)
    for name in ("sds_missing_total", "sds_repairs_requested_total",
                 "sds_dependencies_lost_total", "sds_resends_total",
                 "sds_resend_exhausted_total", "sds_acknowledged_total",
                 "sds_repairs_answered_total", "events_delivered_total",
                 "events_rejected_total", "sds_fetched_waiting_total"):
        assert moved[name] > 0, (name, moved)
    # Repairs are counted per id asked for, not per message carrying the request.
    assert moved["sds_repairs_requested_total"] >= 1
    # Counted per id asked for (and again each time it is asked), not per carrying message.
    assert moved["sds_repairs_requested_total"] >= moved["sds_missing_total"]
