"""``serve``: one trio nursery running every service of a node until asked to stop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import trio

from node.api import ApiRoute, create_app, serve_api
from node.config import Config, parse_host_port
from node.identity import load_or_create_identity
from node.logs import kv
from node.p2p import P2PConfig, P2PHost, open_host
from node.routes import NODE_ROUTES
from node.runtime import NodeInfo, NodeRuntime
from node.services import build_services
from node.snapshot_routes import SNAPSHOT_ROUTES
from node.store import EventStore
from storage import AppendResult, EventRecord, make_engine, upgrade

__all__ = ["serve"]

log = logging.getLogger("syncnode.daemon")


def p2p_config(config: Config) -> P2PConfig:
    return P2PConfig(
        listen_addrs=tuple(config.p2p.listen),
        allowed_peers=frozenset(config.p2p.allowed_peers) or None,
        dial_timeout=config.p2p.dial_timeout_s,
        max_frame_bytes=config.p2p.max_frame_bytes,
        gossip_queue_bytes=config.p2p.gossip_queue_bytes,
        drop_incoming_gossip_fraction=config.p2p.test_drop_incoming_gossip,
        enable_dht=config.p2p.dht,
        # SDS messages are signed by their senders and verified before use: libp2p's own
        # per-message signatures would only double the cost.
        gossip_strict_signing=False,
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
            running, app_routes = await build_services(runtime)
            services = trio.CancelScope()
            nursery.start_soon(_run_services, services, *running)
            all_routes = [*NODE_ROUTES, *SNAPSHOT_ROUTES, *app_routes, *(routes or [])]
            app = create_app(runtime, all_routes)
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
