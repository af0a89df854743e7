"""The running node's shared state: what the API, the CLI's status and the services read."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.config import Config
from node.metrics import Metrics
from node.store import EventStore
from storage import AppendResult, EventRecord, count_events, redacted_url
from sync.identity import peer_id_of

__all__ = ["NodeInfo", "NodeRuntime", "package_version"]


def package_version() -> str:
    try:
        return version("syncnode")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class NodeInfo:
    """What ``serve`` reports once the node is up."""

    peer_id: str
    listen_addrs: list[str]
    api_url: str


@dataclass
class NodeRuntime:
    config: Config
    key: Ed25519PrivateKey
    store: EventStore
    metrics: Metrics = field(default_factory=Metrics)
    host: Any = None  # node.p2p.host.P2PHost once the libp2p host is up
    channels: Any = None  # node.replication.channels.ChannelService
    peers: Any = None  # node.replication.peers.PeerManager
    recon: Any = None  # node.replication.recon.ReconService
    standing: Any = None  # node.p2p.standing.PeerStanding: scores and bans of misbehaving peers
    snapshots: Any = None  # node.snapshots.scheduler.SnapshotScheduler, when [spark] is enabled
    api_url: str = ""
    started_at: float = field(default_factory=time.monotonic)
    version: str = field(default_factory=package_version)

    _commit: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        self.store.on_commit(self._on_commit)

    def _on_commit(self, result: AppendResult, _records: Sequence[EventRecord]) -> None:
        if result.inserted:
            self._commit.set()
            self._commit = trio.Event()

    def commit_signal(self) -> trio.Event:
        """An event set at the next commit that stores something new."""
        return self._commit

    @property
    def peer_id(self) -> str:
        return peer_id_of(self.key)

    @property
    def listen_addrs(self) -> list[str]:
        return list(self.host.listen_addrs) if self.host is not None else []

    async def status(self) -> dict[str, Any]:
        events = await self.store.read(count_events)
        return {
            "peer_id": self.peer_id,
            "version": self.version,
            "network_id": self.config.node.network_id,
            "database": redacted_url(self.config.database_url),
            "uptime_s": round(time.monotonic() - self.started_at, 3),
            "events": events,
            "listen_addrs": self.listen_addrs,
            "api_url": self.api_url,
            "channels": list(self.channels.names if self.channels else self.config.p2p.channels),
        }
