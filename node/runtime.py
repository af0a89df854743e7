"""The running node's shared state: what the API, the CLI's status and the services read."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.api.idempotency import IdempotencyKeys
from node.clock import Clock
from node.config.settings import Config
from node.datadir.disk_usage import DiskUsage
from node.store.events import EventStore
from node.store.signal import CommitSignal
from node.telemetry.metrics import Metrics
from storage import count_events, redacted_url
from sync.identity import peer_id_of

if TYPE_CHECKING:  # the services import the runtime's modules: no import cycle at run time
    from node.p2p import P2PHost
    from node.p2p.standing import PeerStanding
    from node.replication.channels import ChannelService
    from node.replication.ingest import IngestPool
    from node.replication.membership import Membership
    from node.replication.peers import PeerManager
    from node.replication.reachability import ReachabilityService
    from node.replication.recon import ReconService
    from node.snapshots.scheduler import SnapshotScheduler

__all__ = ["ApiAddress", "NodeInfo", "NodeNotReady", "NodeRuntime", "Service", "package_version"]


# ``/v1/status``'s ``sync`` before Recon is up.
STARTING_SYNC = {"state": "unknown", "text": "unknown (the node is starting)", "behind": 0,
                 "rate_per_s": None, "eta_s": None, "peers": {}}


class NodeNotReady(RuntimeError):
    """A part of the node was asked for before the daemon started it."""


class Service(Protocol):
    """A long-running part of the node: the daemon runs each ``run`` in its nursery until
    shutdown cancels it."""

    async def run(self) -> None: ...


def package_version() -> str:
    try:
        return version("syncnode")
    except PackageNotFoundError:
        return "0+unknown"


class ApiAddress:
    """The API's base URL, once its server is up (its port may be picked then). The API serves
    the runtime, so the runtime is built first and cannot be given the URL: the daemon makes
    this before both, hands it to the runtime (which reports it) and tells it the URL when the
    server bound (:meth:`bound`). Empty until then."""

    def __init__(self) -> None:
        self.url = ""

    def bound(self, url: str) -> None:
        self.url = url


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
    # The node's one clock (node.clock), built by the daemon's entry: the daemon hands it to the
    # p2p host and build_parts to every driver, so their instants compare (and a test runs
    # them all on trio's MockClock).
    clock: Clock
    # The store's commit observer the API's long polls and the applications pull from (the
    # daemon builds it before the store and hands it to both).
    commits: CommitSignal
    metrics: Metrics = field(default_factory=Metrics)
    # The ingest worker processes (recon.ingest_workers), built with the store (they may be
    # its writer of fetched events); None: fetched events are verified in threads.
    ingest: IngestPool | None = None
    # The host and the services the daemon built before this runtime (``node.services``
    # ``build_parts``); None in tools and tests without a host.
    host: P2PHost | None = None
    channels: ChannelService | None = None
    peers: PeerManager | None = None
    recon: ReconService | None = None
    standing: PeerStanding | None = None  # scores and bans of misbehaving peers
    membership: Membership | None = None  # address book, peer exchange, connection manager
    # When [spark] is enabled: built with the store (one of its commit observers).
    snapshots: SnapshotScheduler | None = None
    reachability: ReachabilityService | None = None  # when [reachability] is enabled
    api_address: ApiAddress = field(default_factory=ApiAddress)  # the API that serves this
    started_at: float = field(init=False)  # clock.now() when built
    # The Idempotency-Keys of publishes through the API (the event routes'), one per node.
    idempotency: IdempotencyKeys = field(init=False)
    version: str = field(default_factory=package_version)

    _disk: DiskUsage | None = None

    def __post_init__(self) -> None:
        self.started_at = self.clock.now()
        api = self.config.api
        self.idempotency = IdempotencyKeys(self.store, self.metrics, self.clock,
                                           api.idempotency_ttl_s, api.idempotency_max_keys)
        spark = self.config.spark
        self._disk = DiskUsage(
            self.store.engine,
            Path(spark.snapshot_dir or self.config.data_path / "snapshots").expanduser()
            if spark.enabled else None)

    @property
    def api_url(self) -> str:
        """The API's base URL ("" until it listens)."""
        return self.api_address.url

    def commit_signal(self) -> trio.Event:
        """An event set at the next commit that stores something new."""
        return self.commits.next_commit()

    def uptime_s(self) -> float:
        return self.clock.now() - self.started_at

    def require_host(self) -> P2PHost:
        """The libp2p host; the daemon opens it before building anything that needs it."""
        if self.host is None:
            raise NodeNotReady("the libp2p host is not up")
        return self.host

    def require_channels(self) -> ChannelService:
        """The SDS channels; built before the API and the applications start."""
        if self.channels is None:
            raise NodeNotReady("the channel service is not built")
        return self.channels

    @property
    def peer_id(self) -> str:
        return peer_id_of(self.key)

    @property
    def listen_addrs(self) -> list[str]:
        return list(self.host.listen_addrs) if self.host is not None else []

    async def status(self) -> dict[str, Any]:
        events = await self.store.read(count_events)
        sizes = (await trio.to_thread.run_sync(self._disk.sizes, self.clock.now())
                 if self._disk else {})
        return {
            "peer_id": self.peer_id,
            "version": self.version,
            "network_id": self.config.node.network_id,
            "database": redacted_url(self.config.database_url),
            "uptime_s": round(self.uptime_s(), 3),
            "events": events,
            "listen_addrs": self.listen_addrs,
            "api_url": self.api_url,
            "channels": list(self.channels.names if self.channels else self.config.p2p.channels),
            # Bytes on disk (null: unknown, or no snapshot directory yet); refreshed every 30 s.
            "database_bytes": sizes.get("database_bytes"),
            "snapshot_bytes": sizes.get("snapshot_bytes"),
            "address_book": len(self.membership.book) if self.membership is not None else 0,
            **({"network": self.reachability.status()} if self.reachability is not None
               else {"network": {"reachability": "unknown"}}),
            "sync": self.recon.sync.describe() if self.recon is not None else STARTING_SYNC,
        }

    async def wait_synced(self, timeout_s: float) -> None:
        """Return once the node is in sync with its peers, or after ``timeout_s``."""
        if self.recon is not None:
            await self.recon.sync.wait_synced(timeout_s)
