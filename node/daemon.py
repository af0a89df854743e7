"""``serve``: one trio nursery running every service of a node until asked to stop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import trio

from node.api import ApiRoute, create_app, serve_api
from node.apps import AppRunner
from node.channels import ChannelService
from node.config import Config, parse_host_port
from node.discovery import DhtDiscovery
from node.fetch import Fetcher
from node.identity import load_or_create_identity
from node.logs import kv
from node.p2p import P2PConfig, P2PHost, open_host
from node.peers import PeerManager
from node.plugins import PLUGINS
from node.recon_service import ReconService
from node.routes import NODE_ROUTES
from node.runtime import NodeInfo, NodeRuntime
from node.store import EventStore
from storage import AppendResult, EventRecord, make_engine, upgrade
from sync.recon.session import ReconConfig
from sync.sds import SdsConfig

__all__ = ["serve"]

log = logging.getLogger("syncnode.daemon")


def p2p_config(config: Config) -> P2PConfig:
    return P2PConfig(
        listen_addrs=tuple(config.p2p.listen),
        allowed_peers=frozenset(config.p2p.allowed_peers) or None,
        dial_timeout=config.p2p.dial_timeout_s,
        max_frame_bytes=config.p2p.max_frame_bytes,
        drop_incoming_gossip_fraction=config.p2p.test_drop_incoming_gossip,
        enable_dht=config.p2p.dht,
        # SDS messages are signed by their senders and verified before use: libp2p's own
        # per-message signatures would only double the cost.
        gossip_strict_signing=False,
    )


def sds_config(config: Config) -> SdsConfig:
    s = config.sds
    return SdsConfig(
        causal_history_size=s.causal_history_size,
        bloom_capacity=s.bloom_capacity,
        bloom_fp_rate=s.bloom_fp_rate,
        resend_interval=s.resend_interval_s,
        possibly_acked_resend_interval=3 * s.resend_interval_s,
        max_resends=s.max_resends,
        lost_timeout=s.lost_timeout_s,
        sync_interval=s.sync_interval_s,
        sync_jitter=s.sync_interval_s,
        t_min=s.repair_t_min_s,
        t_max=s.repair_t_max_s,
    )


def _stat_reader(host: P2PHost, name: str) -> Callable[[], float]:
    return lambda: float(getattr(host.stats, name))


def register_base_metrics(runtime: NodeRuntime) -> None:
    metrics, store, host = runtime.metrics, runtime.store, runtime.host
    metrics.describe("events_stored_total", "counter", "Events newly committed to the database")
    metrics.describe("events_duplicate_total", "counter", "Events received again, already stored")
    metrics.inc("events_stored_total", 0)
    metrics.inc("events_duplicate_total", 0)

    def on_commit(result: AppendResult, _records: Sequence[EventRecord]) -> None:
        metrics.inc("events_stored_total", len(result.inserted))
        metrics.inc("events_duplicate_total", len(result.duplicates))

    store.on_commit(on_commit)
    metrics.gauge_fn("store_batches", lambda: store.batches, "Write transactions committed")
    metrics.gauge_fn("uptime_seconds", lambda: time.monotonic() - runtime.started_at,
                     "Seconds since the node started")
    metrics.gauge_fn("peers_connected", lambda: len(host.connected_peers()), "Connected peers")
    for name in host.stats.as_dict():
        metrics.gauge_fn(f"p2p_{name}", _stat_reader(host, name), f"libp2p layer counter {name}")


async def _run_services(scope: trio.CancelScope, *services: Any) -> None:
    with scope:
        async with trio.open_nursery() as nursery:
            for service in services:
                nursery.start_soon(service.run)


async def serve(
    config: Config,
    shutdown: trio.Event,
    *,
    routes: list[ApiRoute] | None = None,
    task_status: trio.TaskStatus[NodeInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a node until ``shutdown`` is set; then stop every service and close the database."""
    data_dir = config.data_path
    data_dir.mkdir(parents=True, exist_ok=True)
    key = load_or_create_identity(data_dir)
    engine = make_engine(config.database_url, sqlite_synchronous=config.storage.sqlite_synchronous)
    try:
        await trio.to_thread.run_sync(upgrade, engine)
        store = EventStore(
            engine,
            max_batch=config.storage.batch_max_events,
            max_delay_ms=config.storage.batch_max_delay_ms,
        )
        runtime = NodeRuntime(config=config, key=key, store=store)
        api_host, api_port = parse_host_port(config.api.listen)
        async with open_host(key, p2p_config(config)) as host, trio.open_nursery() as nursery:
            runtime.host = host
            register_base_metrics(runtime)
            await nursery.start(store.run_writer)
            allowed = frozenset(config.p2p.allowed_peers) or None
            names = list(dict.fromkeys(
                [*config.p2p.channels, *(c for p in PLUGINS for c in p.channels(config))]
            ))
            channels = ChannelService(
                host=host, store=store, metrics=runtime.metrics, key=key,
                peer_id=runtime.peer_id, network_id=config.node.network_id,
                channels=names, sds_config=sds_config(config),
                allowed_senders=allowed,
            )
            await channels.load()
            fetcher = Fetcher(host, store, runtime.metrics, channels.ingest, channels.is_missing)
            channels.on_missing = fetcher.want
            peers = PeerManager(host, store, runtime.metrics)
            await peers.load(config.p2p.bootstrap)
            recon = ReconService(
                host=host, store=store, channels=channels, metrics=runtime.metrics,
                network_id=config.node.network_id, interval_s=config.recon.interval_s,
                session_timeout_s=config.recon.session_timeout_s,
                fetch_batch=config.recon.fetch_batch,
                config=ReconConfig(fanout=config.recon.fanout),
                allowed_senders=allowed,
            )
            await recon.load()
            runtime.channels, runtime.peers, runtime.recon = channels, peers, recon
            bundles = [plugin.build(runtime) for plugin in PLUGINS]
            app_routes = [r for b in bundles for r in b.routes]
            services = trio.CancelScope()
            running: list[Any] = [channels, fetcher, peers, recon]
            running += [AppRunner(b.app, store, runtime.metrics, runtime.commit_signal)
                        for b in bundles]
            if config.p2p.dht:
                running.append(DhtDiscovery(host, peers, runtime.metrics, config.node.network_id,
                                            config.p2p.channels, config.p2p.dht_interval_s))
            nursery.start_soon(_run_services, services, *running)
            app = create_app(runtime, [*NODE_ROUTES, *app_routes, *(routes or [])])
            runtime.api_url = await nursery.start(serve_api, app, api_host, api_port, shutdown)
            info = NodeInfo(runtime.peer_id, runtime.listen_addrs, runtime.api_url)
            log.info("node started", extra=kv(peer_id=info.peer_id, api=info.api_url,
                                               listen=",".join(info.listen_addrs)))
            task_status.started(info)
            await shutdown.wait()
            log.info("shutting down")
            services.cancel()
            # The API stops on ``shutdown`` by itself; the writer drains its queue, then returns.
            await store.close()
    finally:
        engine.dispose()
        log.info("database closed")
