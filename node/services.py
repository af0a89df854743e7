"""The composition root: builds a node's long-running services and the routes of its API.

``build_parts`` makes the replication services (``NodeParts``), the daemon hands them to the
runtime's constructor, and ``build_services`` adds the applications built on that runtime: no
part is set on a built object. Each service has an ``async run()``; the daemon runs them all in
one nursery and cancels them together at shutdown. This is the one module that knows both the
runtime and every part of the node: route tables and applications read the node through their
own narrow interfaces (``NodeViews``), so none of them imports the runtime or this module back.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.engine import make_url

from node.api.app import ApiNode
from node.api.health import HEALTH_ROUTES, HealthNode
from node.api.node_metrics import MetricsNode
from node.api.peer_routes import PeersNode
from node.api.routes import NODE_ROUTES, EventsNode
from node.api.ui_routes import ui_routes
from node.apps.plugins import PLUGINS
from node.apps.runner import AppHost, AppRunner
from node.clock import Clock
from node.config.channels import channel_names, channel_profiles, channel_writers
from node.config.combined import recon_config, sds_config
from node.config.settings import Config
from node.httpkit import ApiRoute
from node.p2p import P2PHost
from node.p2p.standing import PeerStanding
from node.replication.channel_state import ChannelMaker
from node.replication.channels import ChannelService
from node.replication.discovery import DhtDiscovery
from node.replication.driver import ReplicationDriver
from node.replication.fetch import Fetcher, gap_planner
from node.replication.gossip_outbox import GossipOutbox
from node.replication.ingest import IngestPool
from node.replication.membership import Membership
from node.replication.peers import PeerManager
from node.replication.reachability import ReachabilityService
from node.replication.recon import ReconService, recon_interests, recon_lifecycle
from node.replication.recon_summary import open_keys
from node.replication.verify import MAX_EVENT_BYTES
from node.replication.work import WorkGate, work_limits
from node.runtime import NodeRuntime, Service
from node.snapshots.routes import SNAPSHOT_ROUTES, SnapshotsNode
from node.store.commits import RemoteWriter
from node.store.events import EventStore
from node.telemetry.memtrace import memtrace_from_env
from node.telemetry.metrics import Metrics
from node.ui import UiSessions
from storage import weaker_level
from sync.gossip import GossipLimits
from sync.identity import peer_id_of
from sync.ingest import IngestSpec
from sync.membership import Liveness
from sync.recon import KeyStore
from sync.replication import ChannelSet, ExchangeSetup, ReplicationCore
from sync.sds import SdsChannel

__all__ = [
    "NodeParts", "NodeViews", "api_routes", "build_parts", "build_services", "channel_names",
    "channel_profiles",
    "channel_writers", "fetched_writer", "ingest_pool", "node_views", "replication_driver",
    "sds_config",
]


class NodeViews(NamedTuple):
    """The runtime as each consumer sees it: one narrow interface per route table, for the
    node-wide metrics and for the applications."""

    api: ApiNode
    events: EventsNode
    peers: PeersNode
    health: HealthNode
    snapshots: SnapshotsNode
    metrics: MetricsNode
    apps: AppHost


def node_views(runtime: NodeRuntime) -> NodeViews:
    """The runtime behind every interface (mypy checks here that it offers each one)."""
    return NodeViews(runtime, runtime, runtime, runtime, runtime, runtime, runtime)


def api_routes(app_routes: list[ApiRoute], sessions: UiSessions,
               extra: list[ApiRoute] | None = None) -> list[ApiRoute]:
    """Every route the API serves. A handler is called with the object the app was created
    with (``views.api``: the runtime, which ``node_views`` shows offers every table's
    interface); each table's handlers are typed by the interface they use."""
    return [*NODE_ROUTES, *SNAPSHOT_ROUTES, *HEALTH_ROUTES, *app_routes, *ui_routes(sessions),
            *(extra or [])]


def _in_memory(url: str) -> bool:
    """A database only this process can see (no worker can write to it)."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def ingest_pool(config: Config, metrics: Metrics, clock: Clock) -> IngestPool | None:
    """The ingest worker processes (``recon.ingest_workers``; 0: verify in threads)."""
    if not config.recon.ingest_workers:
        return None
    return IngestPool(IngestSpec(config.node.network_id, config.recon.event_id_layout,
                                 channel_profiles(config), MAX_EVENT_BYTES),
                      config.recon.ingest_workers, metrics, clock)


def fetched_writer(config: Config, pool: IngestPool | None) -> RemoteWriter | None:
    """The store's writer of fetched events: the ingest workers when they write
    (``recon.ingest_workers_write``; never an in-memory database, which only this process
    sees), at the relayed durability level; None: the store commits them itself."""
    if pool is None or not config.recon.ingest_workers_write or _in_memory(config.database_url):
        return None
    return pool.remote_writer(config.database_url, weaker_level(
        config.storage.sqlite_synchronous, config.storage.relayed_synchronous),
        config.storage.sqlite_writer_cache_mib)


@dataclass(frozen=True)
class NodeParts:
    """The node's replication services, built before the runtime that holds them
    (``NodeRuntime``'s constructor takes each), so nothing is set on a built object."""

    standing: PeerStanding
    channels: ChannelService
    fetcher: Fetcher
    recon: ReconService
    membership: Membership
    peers: PeerManager
    reachability: ReachabilityService | None
    dht: DhtDiscovery | None


def replication_driver(config: Config, peer_id: str, channels: Mapping[str, SdsChannel],
                       keys: KeyStore, *, host: P2PHost, store: EventStore, metrics: Metrics,
                       standing: PeerStanding | None, clock: Clock,
                       rng: random.Random) -> ReplicationDriver:
    """The node's one replication core, over ``channels`` (restored) and the key store
    ``keys``, and the one driver that carries out its actions, on the node's settings."""
    network_id = config.node.network_id
    allowed = frozenset(config.p2p.allowed_peers) or None
    limits = GossipLimits(peer_rate=config.p2p.gossip_peer_rate,
                          peer_burst=config.p2p.gossip_peer_burst)
    core = ReplicationCore(
        recon_lifecycle(peer_id, recon_interests(network_id, list(channels), peer_id, allowed),
                        config.recon, rng),
        gap_planner(config.fetch, rng),
        # Every session's frames are charged to its peer before they are answered (the
        # service's WorkGate).
        ExchangeSetup(keys, recon_config(config), config.recon.max_missing_keys,
                      timeout_s=config.recon.session_timeout_s, charging=True),
        ChannelSet.of(channels, peer_id, network_id, config=sds_config(config),
                      event_id_layout=config.recon.event_id_layout, members=allowed,
                      writers=channel_writers(config), gossip_limits=limits))
    outbox = GossipOutbox(host, network_id, metrics, clock, config.p2p.gossip_linger_ms / 1000,
                          limits)
    return ReplicationDriver(core=core, host=host, store=store, metrics=metrics,
                             standing=standing, clock=clock, outbox=outbox)


async def build_parts(config: Config, key: Ed25519PrivateKey, store: EventStore,
                      metrics: Metrics, clock: Clock, host: P2PHost,
                      ingest: IngestPool | None, liveness: Liveness) -> NodeParts:
    """Create (and load from the database) the replication services, on the node's clock.
    ``host`` was opened with ``liveness`` (``membership_liveness``) and with the peers' scores
    (``PeerScoring``), which its standing charges."""
    peer_id = peer_id_of(key)
    standing = PeerStanding(host)
    rng = random.Random()
    names = channel_names(config)
    keys = await open_keys(store, config.recon)
    maker = ChannelMaker(peer_id, key, sds_config(config), channel_profiles(config), store,
                         metrics)
    now = clock.wall()
    restored = {name: await maker.restore(name, now) for name in names}
    driver = replication_driver(config, peer_id, restored, keys.store, host=host, store=store,
                                metrics=metrics, standing=standing, clock=clock, rng=rng)
    channels = ChannelService(driver, member_estimate=config.sds.member_estimate)
    work = WorkGate(work_limits(config.peers), metrics, standing, clock)
    fetcher = Fetcher(host, store, metrics, channels.fetched.ingest, driver, config.fetch,
                      standing=standing, work=work)
    recon = ReconService(
        host=host, store=store, channels=channels, metrics=metrics,
        network_id=config.node.network_id, section=config.recon, driver=driver, clock=clock,
        keys=keys, fetcher=fetcher, ingest=ingest, work=work,
    )
    membership = Membership(host, store, metrics, config.membership,
                            in_session=recon.schedule.in_session, liveness=liveness,
                            activity=recon.activity,
                            penalise=standing.penalise, clock=clock)
    peers = PeerManager(host, store, metrics, clock=clock, on_joined=membership.learn,
                        on_forgotten=membership.forget)
    await peers.load(config.p2p.bootstrap)
    await membership.load([k.addr for k in peers.known.values()])
    reachability = None if host.relay is None else ReachabilityService(
        host, host.relay, metrics, clock,
        announce=membership.px.ask if config.membership.px else None,
        direct_addrs=membership.direct_addrs, penalise=standing.penalise)
    dht = DhtDiscovery(host, peers, metrics, config.node.network_id, channels.names,
                       config.p2p.dht_interval_s) if config.p2p.dht else None
    return NodeParts(standing, channels, fetcher, recon, membership, peers, reachability, dht)


def build_services(runtime: NodeRuntime, parts: NodeParts) -> tuple[list[Service], list[ApiRoute]]:
    """Every service the daemon runs, the applications' included (built on the runtime), and
    the applications' routes."""
    apps = node_views(runtime).apps
    bundles = [plugin.build(apps) for plugin in PLUGINS]
    services: list[Service] = [parts.channels, parts.peers, parts.recon,
                               parts.membership, *([runtime.ingest] if runtime.ingest else [])]
    # An application with no channels (disabled in config) costs nothing.
    services += [
        AppRunner(b.app, runtime.store, runtime.metrics, runtime.commits, runtime.clock)
        for b in bundles if b.app.channels
    ]
    services += [s for b in bundles for s in getattr(b, "services", ())]
    if runtime.snapshots is not None:  # built with the store, which counts commits into it
        services.append(runtime.snapshots)
    services += [s for s in (parts.reachability, parts.dht,
                                   memtrace_from_env(runtime.clock)) if s is not None]
    return services, [r for b in bundles for r in b.routes]
