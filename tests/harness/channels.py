"""A node's channel service in a test, built as the daemon builds it (``replication_driver``:
the one core over the test's own SDS channels, the one driver, a real event store) on the
default settings, with no libp2p host unless the test gives one."""

from __future__ import annotations

import random
from collections.abc import Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.config.settings import Config
from node.replication import ChannelService
from node.replication.channel_state import ChannelMaker
from node.replication.clock import Clock
from node.services import replication_driver
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from sync.identity import peer_id_of
from sync.recon import MemoryKeyStore
from sync.sds import SdsChannel, SdsConfig

__all__ = ["channel_service", "restored_channel_service"]


def channel_service(store: EventStore, metrics: Metrics, peer_id: str,
                    channels: Mapping[str, SdsChannel], clock: Clock, *,
                    host: object = None, config: Config | None = None,
                    member_estimate: int = 0) -> ChannelService:
    driver = replication_driver(
        config or Config(), peer_id, channels, MemoryKeyStore.from_sorted([]),
        host=host, store=store, metrics=metrics,  # type: ignore[arg-type]
        standing=None, clock=clock, rng=random.Random(1))
    return ChannelService(driver, member_estimate=member_estimate)


async def restored_channel_service(store: EventStore, metrics: Metrics, key: Ed25519PrivateKey,
                                   clock: Clock, sds_config: SdsConfig | None = None,
                                   names: tuple[str, ...] = ("c",)) -> ChannelService:
    """The service over channels restored from ``store`` as the daemon restores them at start
    (``ChannelMaker``), on SDS settings ``sds_config``."""
    peer_id = peer_id_of(key)
    maker = ChannelMaker(peer_id, key, sds_config or SdsConfig(), {}, store, metrics)
    channels = {name: await maker.restore(name, clock.wall()) for name in names}
    return channel_service(store, metrics, peer_id, channels, clock)
