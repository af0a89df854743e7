"""``serve``: one trio nursery running every service of a node until asked to stop."""

from __future__ import annotations

import logging
import sys

import trio

from node.api.app import create_app, serve_api
from node.api.guard import ApiGuard, HostPolicy
from node.api.node_metrics import register_node_metrics
from node.clock import Clock
from node.config.combined import check_combined_keys
from node.config.fields import parse_host_port
from node.config.membership import conn_limits
from node.config.net import reachability_config
from node.config.settings import Config
from node.datadir.api_address import clear_api_url, remove_api_url, write_api_url
from node.datadir.api_token import load_or_create_token
from node.datadir.lock import DataDirLocked, RepoLock
from node.httpkit import ApiRoute
from node.p2p import P2PConfig
from node.p2p.addrs import bind_problem, unbindable_listen_addr
from node.p2p.identity import load_or_create_identity
from node.p2p.run import open_host
from node.p2p.scoring import PeerScoring
from node.p2p.standing import score_config
from node.replication.membership import membership_liveness
from node.replication.recon import ReconService
from node.runtime import ApiAddress, NodeInfo, NodeRuntime, Service
from node.services import (
    api_routes,
    build_parts,
    build_services,
    fetched_writer,
    ingest_pool,
    node_views,
)
from node.snapshots.scheduler import scheduler_from_config
from node.store.events import EventStore
from node.store.signal import CommitSignal
from node.supervisor import supervise
from node.telemetry.gc_pauses import GcPauses
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from node.ui import UiSessions
from storage import make_engine, upgrade

__all__ = ["StartupError", "serve"]

log = logging.getLogger("syncnode.daemon")
# Longest a clean shutdown waits to save the Recon key store summary (a few MiB, one write).
SUMMARY_SAVE_TIMEOUT_S = 30.0
# The GIL switch interval in a node process (Python: 5 ms); see _serve_locked.
SWITCH_INTERVAL_S = 0.001


class StartupError(RuntimeError):
    """The node cannot start (data dir in use, a port taken, ...): one line for the user."""


def _check_ports(config: Config) -> None:
    """Fail before opening anything when a configured port is taken (by another node, mostly)."""
    if busy := unbindable_listen_addr(config.p2p.listen):
        raise StartupError(f"cannot listen on p2p.listen {busy[0]}: {busy[1]} "
                           "(another node? pick another port, or tcp/0 for a free one)")
    host, port = parse_host_port(config.api.listen)
    if problem := bind_problem(host, port):
        raise StartupError(f"cannot listen on api.listen {config.api.listen}: {problem} "
                           "(another node? pick another port, or port 0 for a free one)")


def _open_data_dir(config: Config) -> RepoLock:
    data_dir = config.data_path
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = RepoLock(data_dir)
        lock.acquire()
    except DataDirLocked as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"cannot use data dir {data_dir}: {exc.strerror or exc}") from None
    # Ours now: an api_url still here is a killed node's; until this node answers, clients
    # must not be sent to that address.
    clear_api_url(data_dir)
    return lock


def p2p_config(config: Config) -> P2PConfig:
    return P2PConfig(
        listen_addrs=tuple(config.p2p.listen),
        allowed_peers=frozenset(config.p2p.allowed_peers) or None,
        dial_timeout=config.p2p.dial_timeout_s,
        read_timeout=config.p2p.read_timeout_s,
        max_frame_bytes=config.p2p.max_frame_bytes,
        gossip_queue_bytes=config.p2p.gossip_queue_bytes,
        gossip_degree=config.p2p.gossip_degree,
        gossip_degree_low=config.p2p.gossip_degree_low,
        gossip_degree_high=config.p2p.gossip_degree_high,
        gossip_idontwant=config.p2p.gossip_idontwant,
        peer_event_queue_size=config.p2p.peer_event_queue,
        drop_incoming_gossip_fraction=config.p2p.test_drop_incoming_gossip,
        enable_dht=config.p2p.dht,
        dht_timeout=config.p2p.dht_timeout_s,
        # SDS messages are signed by their senders and verified before use: libp2p's own
        # per-message signatures would only double the cost.
        gossip_strict_signing=False,
        reachability=reachability_config(config.reachability),
        conn_limits=conn_limits(config.membership),
    )


def register_base_metrics(runtime: NodeRuntime) -> None:
    register_node_metrics(node_views(runtime).metrics)


async def _run_services(scope: trio.CancelScope, runtime: NodeRuntime,
                        *services: Service) -> None:
    # Each under its supervisor: an unexpected error is logged, counted and the service
    # restarted; it never unwinds this nursery (and the node) with it.
    with scope:
        async with trio.open_nursery() as nursery:
            for service in services:
                nursery.start_soon(supervise, type(service).__name__, service.run,
                                   runtime.metrics, runtime.clock)


async def serve(
    config: Config,
    shutdown: trio.Event,
    clock: Clock,
    *,
    routes: list[ApiRoute] | None = None,
    task_status: trio.TaskStatus[NodeInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a node until ``shutdown`` is set; then stop every service and close the database.

    ``clock`` is the node's one clock (``node.clock``): the p2p host and every service read it,
    so a test can run the daemon's services on trio's ``MockClock`` (``TrioWallClock``).

    :raises StartupError: before anything is opened when the data dir is held by another
        process (its ``repo.lock``) or a configured port is taken.
    :raises ConfigError: before anything is opened when config keys do not work together.
    """
    check_combined_keys(config)
    lock = _open_data_dir(config)
    try:
        await _serve_locked(config, shutdown, clock, routes, task_status)
    finally:
        lock.release()


async def _serve_locked(
    config: Config,
    shutdown: trio.Event,
    clock: Clock,
    routes: list[ApiRoute] | None,
    task_status: trio.TaskStatus[NodeInfo],
) -> None:
    _check_ports(config)
    # Recon work runs in a worker thread (node.replication.recon_work): while it computes, the
    # trio thread waits up to one switch interval for the GIL at every step (5 ms by default,
    # which added up to seconds of publish latency under a Recon flood; issue 28).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    key = load_or_create_identity(config.data_path)
    token = load_or_create_token(config.data_path)
    engine = make_engine(config.database_url, sqlite_synchronous=config.storage.sqlite_synchronous,
                         relayed_synchronous=config.storage.relayed_synchronous)
    recon: ReconService | None = None
    api_url = ""
    gc_pauses = GcPauses()
    gc_pauses.install()
    try:
        await trio.to_thread.run_sync(upgrade, engine)
        metrics = Metrics()
        gc_pauses.register(metrics)
        ingest = ingest_pool(config, metrics, clock)
        # The store's commit observers, built first: it is complete once built.
        commits = CommitSignal()
        snapshots = scheduler_from_config(config, clock)
        store = EventStore(
            engine,
            max_batch=config.storage.batch_max_events,
            max_delay_ms=config.storage.batch_max_delay_ms,
            relayed_delay_ms=config.storage.relayed_batch_delay_ms,
            remote_writer=fetched_writer(config, ingest),
            reports=True,  # read by the replication driver (``ReconService.run``)
            observers=[commits.committed, *([snapshots.committed] if snapshots else [])],
        )
        api_host, api_port = parse_host_port(config.api.listen)
        # What the host learns of peers, built before it: who proved alive (membership's
        # liveness) and who broke the transport's rules (the peers' scores). The services that
        # act on them need the running host, so they are handed these when built after it.
        liveness = membership_liveness(config.membership)
        scoring = PeerScoring(metrics, score_config(config.peers), clock)
        async with open_host(key, p2p_config(config), clock=clock, heard=liveness.heard,
                             scoring=scoring) as host, \
                trio.open_nursery() as nursery:
            if len(host.listen_addrs) < len(config.p2p.listen):
                # libp2p logs a failed bind and carries on: a node must not run half-deaf.
                raise StartupError(f"cannot listen on every p2p.listen address "
                                   f"{list(config.p2p.listen)}; listening on {host.listen_addrs}")
            await nursery.start(store.run_writer)
            parts = await build_parts(config, key, store, metrics, clock, host, ingest,
                                      liveness)
            recon = parts.recon
            # Built whole: every part it holds is a constructor argument. The API's address
            # is known only once the API that serves this runtime is up: see ApiAddress.
            api_address = ApiAddress()
            runtime = NodeRuntime(
                config=config, key=key, store=store, clock=clock, commits=commits,
                metrics=metrics, ingest=ingest, host=host, channels=parts.channels,
                peers=parts.peers, recon=parts.recon, standing=parts.standing,
                membership=parts.membership, snapshots=snapshots,
                reachability=parts.reachability, api_address=api_address)
            register_base_metrics(runtime)
            running, app_routes = build_services(runtime, parts)
            services = trio.CancelScope()
            nursery.start_soon(_run_services, services, runtime, *running)
            sessions = UiSessions(config.ui, runtime.metrics, runtime.clock)
            views = node_views(runtime)
            app = ApiGuard(
                create_app(views.api, api_routes(app_routes, sessions, routes),
                           config.api),
                token=token, hosts=HostPolicy(api_host, config.api.hosts), metrics=runtime.metrics,
                clock=runtime.clock,
                ui=sessions,
            )
            api_url = await nursery.start(serve_api, app, api_host, api_port, shutdown,
                                          config.api)
            api_address.bound(api_url)
            # For client commands given only --data-dir (node.datadir.api_address).
            write_api_url(config.data_path, api_url)
            info = NodeInfo(runtime.peer_id, runtime.listen_addrs, runtime.api_url)
            log.info("node started", extra=kv(peer_id=info.peer_id, api=info.api_url,
                                               listen=",".join(info.listen_addrs)))
            task_status.started(info)
            if config.node.gc_freeze:
                # Start-up is done: what it built lives until exit (gc_pauses module).
                log.info("start-up objects frozen out of garbage collection",
                         extra=kv(objects=gc_pauses.freeze()))
            await shutdown.wait()
            log.info("shutting down")
            services.cancel()
            # The API stops on ``shutdown`` by itself; the writer drains its queue, then returns.
            await store.close()
    finally:
        gc_pauses.uninstall()
        if api_url:
            remove_api_url(config.data_path, api_url)
        # After the writer's last commit (the nursery is done): the next start loads this.
        # Shielded and bounded: the process's shutdown arrives as a cancellation (node_main).
        if recon is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(SUMMARY_SAVE_TIMEOUT_S):
                await recon.save_summary()
        engine.dispose()
        log.info("database closed")
