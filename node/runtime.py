"""The running node's shared state: what the API, the CLI's status and the services read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.config import Config
from node.metrics import Metrics
from node.store import EventStore
from storage import count_events, redacted_url
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
    host: Any = None  # node.p2p.P2PHost once the libp2p host is up
    api_url: str = ""
    started_at: float = field(default_factory=time.monotonic)
    version: str = field(default_factory=package_version)

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
            "channels": list(self.config.p2p.channels),
        }
