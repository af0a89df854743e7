"""The node gives each SDS channel its member estimate (issue 30): SDS-R response groups are
``N div 128 + 1``, and without the node's N a channel counted only the senders it heard. Real
libp2p hosts subscribed to the channel's topic, the real event store on SQLite."""

from __future__ import annotations

import random
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.config.settings import Config, P2PSection
from node.p2p.run import open_host
from node.replication import ChannelService
from node.replication.gossip_outbox import topic_of
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from storage import make_engine, upgrade
from sync.identity import peer_id_of
from sync.sds import SdsChannel, SdsConfig
from tests.harness.channels import channel_service
from tests.harness.cluster import until

T0 = 1_000_000.0


def _service(host: object, key: Ed25519PrivateKey, tmp: Path, **kw: object) -> ChannelService:
    engine = make_engine(f"sqlite:///{tmp / f'{peer_id_of(key)[-6:]}.db'}")
    upgrade(engine)
    return channel_service(EventStore(engine), Metrics(), peer_id_of(key), {
        "c": SdsChannel("c", peer_id_of(key), key, SdsConfig(), random.Random(1), T0)},
        SystemClock(), host=host, **kw)  # type: ignore[arg-type]


@pytest.mark.trio
async def test_node_gives_channels_its_member_estimate(tmp_path: Path) -> None:
    keys = [Ed25519PrivateKey.from_private_bytes(bytes([40 + i]) * 32) for i in range(3)]
    topic = topic_of(1, "c")
    async with AsyncExitStack() as stack:
        hosts = [await stack.enter_async_context(open_host(k, clock=SystemClock())) for k in keys]
        for host in hosts:
            await host.subscribe(topic)
        for other in hosts[1:]:
            await hosts[0].connect(other.listen_addrs[0])
        await until(lambda: len(hosts[0].gossip_peers(topic)) >= 2, 30, "fewer than 2 gossip peers")
        # Automatic: the peers subscribed to the topic, and us.
        auto = _service(hosts[0], keys[0], tmp_path)
        ch = auto.channels["c"]
        assert ch.layers.repair.members.count(T0) == 0
        auto.estimate_members()
        assert ch.layers.repair.members.count(T0) == 3
        # The configured override (sds.member_estimate): a group larger than our neighbours.
        fixed = _service(hosts[0], keys[0], tmp_path, member_estimate=500)
        fixed.estimate_members()
        assert fixed.channels["c"].layers.repair.members.count(T0) == 500
        assert fixed.channels["c"].layers.repair.response_groups(T0) == 500 // 128 + 1
        # A closed group (p2p.allowed_peers): its size.
        members = frozenset(peer_id_of(Ed25519PrivateKey.generate()) for _ in range(299))
        closed = _service(hosts[0], keys[0], tmp_path, config=Config(
            p2p=P2PSection(allowed_peers=tuple(sorted(members)))))
        closed.estimate_members()
        assert closed.channels["c"].layers.repair.members.count(T0) == 300
        assert closed.channels["c"].layers.repair.response_groups(T0) == 3
