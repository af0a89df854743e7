"""The replication drivers read one injected clock (node/replication/clock.py), so a driver that
waits on time runs on trio's MockClock: here the channel service's SDS timer loop resends an
unacknowledged message and gives it up over 20 virtual seconds, with no real sleeping. The
real event store on SQLite behind it."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from trio.testing import MockClock

from node.p2p import P2PConfig
from node.p2p.run import open_host
from node.replication import PeerManager
from node.replication.clock import TrioWallClock
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from storage import make_engine, upgrade
from sync.identity import peer_id_of
from sync.sds import SdsChannel, SdsConfig
from tests.harness.channels import channel_service
from tests.harness.clocks import let_pass

CONFIG = SdsConfig(resend_interval=1.0, possibly_acked_resend_interval=3.0, max_resends=2,
                   lost_timeout=6.0, sync_interval=1.0, sync_jitter=0.5, t_min=0.2, t_max=0.4)
T0 = 1_000_000.0


def test_the_sds_timer_loop_runs_on_a_mock_clock(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'node.db'}")
    upgrade(engine)
    key = Ed25519PrivateKey.generate()
    metrics = Metrics()
    sent: list[bytes] = []

    async def main() -> float:
        clock = TrioWallClock(T0)
        ch = SdsChannel("c", peer_id_of(key), key, CONFIG, random.Random(1), clock.wall())
        service = channel_service(EventStore(engine), metrics, peer_id_of(key), {"c": ch}, clock)
        sent.append(ch.send(b"nobody acknowledges this", clock.wall()))
        service.driver.carry_out(service.core.drain("c"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.driver.channel_timers)
            await let_pass(20.0)  # virtual: the mock clock jumps whenever all tasks wait
            nursery.cancel_scope.cancel()
        while True:
            try:
                sent.append(service.driver.outbox._receive.receive_nowait()[1])
            except trio.WouldBlock:
                return clock.wall()

    end = trio.run(main, clock=MockClock(autojump_threshold=0))
    assert end >= T0 + 20.0  # the wall clock moved with the mock clock
    assert metrics.value("sds_resend_exhausted_total") == 1  # resent, then given up
    assert len(sent) > CONFIG.max_resends + 1  # the message, its resends and sync messages


def test_redials_back_off_on_the_mock_clock(tmp_path: Path) -> None:
    """``PeerManager`` redials a known peer that refuses every dial (a real libp2p host
    dialling a closed loopback port) with ``sync.dialing`` back-off (2, 4, 8 ... 60 s) on its
    injected clock: two virtual minutes pass in a few seconds. A driver that
    read ``time.monotonic`` saw no time pass and dialled only as often as real time allowed."""
    engine = make_engine(f"sqlite:///{tmp_path / 'node.db'}")
    upgrade(engine)
    metrics = Metrics()
    with socket.socket() as probe:  # a port nobody listens on (closed again at once)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    absent = peer_id_of(Ed25519PrivateKey.from_private_bytes(b"\x05" * 32))

    async def main() -> None:
        clock = TrioWallClock(T0)
        async with open_host(Ed25519PrivateKey.from_private_bytes(b"\x06" * 32),
                             P2PConfig(dial_timeout=5.0), clock=clock) as host:
            peers = PeerManager(host, EventStore(engine), metrics, clock=clock)
            peers.schedule.remember(f"/ip4/127.0.0.1/tcp/{port}/p2p/{absent}")
            with trio.move_on_after(150.0):  # virtual
                await peers._dial_loop()

    trio.run(main, clock=MockClock(autojump_threshold=0.005))
    # Waits 2, 4, 8, 16, 32, then 60 s: dials at 0, 2, 6, 14, 30, 62 and 122 s (the next at
    # 182). A driver on another clock dials as often as real time allows: once or twice.
    failures = metrics.value("peer_dial_failures_total")
    assert failures == 7, failures
