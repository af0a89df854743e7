"""The node-wide metrics: what they mean, and the series computed from the store and the host.

Counters incremented elsewhere (fetch, peers, discovery, applications) are described here so
that every series on ``/metrics`` carries a help text that explains it. docs/node.md lists them.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from node.p2p import P2PHost
    from node.store.events import EventStore
    from node.telemetry.metrics import Metrics

__all__ = ["P2P_HELP", "MetricsNode", "register_node_metrics", "register_p2p_metrics",
           "register_store_metrics"]


class MetricsNode(Protocol):
    """What the node-wide series read of the node (``node.runtime.MetricsNode``)."""

    @property
    def metrics(self) -> Metrics: ...

    @property
    def store(self) -> EventStore: ...

    @property
    def version(self) -> str: ...

    def uptime_s(self) -> float: ...

    def require_host(self) -> P2PHost: ...

OTHER_COUNTERS = {
    "fetch_served_total": "Events sent to peers that asked for them by id",
    "fetch_received_total": "Missing events received from peers after asking by id",
    "fetch_failures_total": "Requests for missing events by id that failed or timed out",
    "fetch_bad_requests_total": "Malformed fetch-by-id requests received from peers",
    "peer_joins_total": "Peers joined through the API or CLI (join)",
    "peer_dial_failures_total": "Dials of known or bootstrap peers that failed",
    "dht_peers_found_total": "Peers found through DHT discovery",
    "dht_errors_total": "DHT discovery rounds that failed",
    "app_events_applied_total": "Events applied by a hosted application, by app",
    "app_errors_total": "Events a hosted application failed to apply, by app",
    "node_task_failures_total": "Unexpected errors a long-lived task of the node raised, by "
                                "task (it was logged and restarted; the node stayed up)",
}

P2P_HELP = {
    "connections_opened": "libp2p connections opened (inbound and outbound)",
    "connections_closed": "libp2p connections closed",
    "connections_unnoticed": "Connections found closed although libp2p sent no notice of it "
                             "(they no longer hold their peer connected)",
    "refused_connections": "Connections refused because the peer is outside p2p.allowed_peers",
    "dial_failures": "Outbound libp2p dials that failed",
    "streams_opened": "Outbound streams opened and negotiated",
    "streams_accepted": "Inbound streams handed to a protocol handler",
    "stream_open_failures": "Outbound streams that could not be opened",
    "frame_errors": "Garbage, oversized or truncated frames received from peers",
    "timeouts": "Reads or writes on framed streams that timed out",
    "handler_errors": "Exceptions that escaped a stream handler",
    "gossip_published": "Gossip messages published",
    "gossip_received": "Gossip messages delivered to this node's subscriptions",
    "gossip_copies_received": "Gossip messages read from peers, duplicate copies included",
    "gossip_duplicates_received": "Gossip copies dropped as duplicates of a message already "
                                  "seen (one per extra mesh peer; p2p.gossip_degree)",
    "gossip_idontwant_sent": "Message ids this node sent in IDONTWANT before validating the "
                             "message (p2p.gossip_idontwant)",
    "gossip_idontwant_rpcs": "RPCs started to carry IDONTWANT because none was queued for the "
                             "peer (p2p.gossip_idontwant)",
    "gossip_dropped_test": "Gossip messages dropped on purpose (p2p.test_drop_incoming_gossip)",
    "gossip_dropped_overflow": "Gossip messages dropped because a subscriber's queue was full",
    "gossip_refused_foreign": "Gossip messages refused: originated outside p2p.allowed_peers",
    "refused_banned": "Connections and streams refused because the peer is banned for "
                      "misbehaviour (see peer_bans_total)",
    "peer_events_dropped": "Peer connect/disconnect notices dropped (listener queue full)",
    "yamux_window_overruns": "Connections ended because the peer sent more on a stream than "
                             "the receive window granted to it (a protocol error; penalty "
                             "protocol)",
}


def _p2p_reader(host: Any, name: str) -> Callable[[], float]:
    return lambda: float(getattr(host.stats, name))


def register_store_metrics(metrics: Metrics, store: EventStore) -> None:
    """The event store's own counters (its writer task's commits, local and remote)."""
    metrics.counter_fn("events_stored_total", lambda: float(store.committed_events),
                       "Events newly committed to the database (from any source)")
    metrics.counter_fn("store_batches_total", lambda: float(store.batches),
                       "Write transactions committed by the event store (batches of events)")
    metrics.counter_fn("store_remote_appends_total", lambda: float(store.remote_appends),
                       "Transactions of fetched events committed by an ingest worker "
                       "(recon.ingest_workers_write)")
    metrics.counter_fn("store_remote_settled_total", lambda: float(store.remote_settled),
                       "Appends of fetched events whose ingest worker died before answering, "
                       "settled by reading the log")


def register_node_metrics(runtime: MetricsNode) -> None:
    metrics, store, host = runtime.metrics, runtime.store, runtime.require_host()
    for name, help_text in OTHER_COUNTERS.items():
        metrics.describe(name, "counter", help_text)
    # Unlabelled counters start at 0 so that rate() works from the first scrape.
    for name in OTHER_COUNTERS:
        if not name.startswith(("app_", "node_task_")):
            metrics.inc(name, 0)

    metrics.describe("build_info", "gauge",
                     "Always 1; the labels say which syncnode and Python this node runs")
    metrics.set("build_info", 1, version=runtime.version,
                python=platform.python_version(), implementation=platform.python_implementation())
    register_store_metrics(metrics, store)
    metrics.gauge_fn("uptime_seconds", runtime.uptime_s,
                     "Seconds since the node started")
    register_p2p_metrics(metrics, host)


def register_p2p_metrics(metrics: Metrics, host: P2PHost) -> None:
    """The host's peer count and its ``P2PStats`` counters, as ``p2p_<name>_total``."""
    metrics.gauge_fn("peers_connected", lambda: float(len(host.connected_peers())),
                     "Peers with an open libp2p connection")
    for name in host.stats.as_dict():
        metrics.counter_fn(f"p2p_{name}_total", _p2p_reader(host, name),
                           P2P_HELP.get(name, f"libp2p layer: {name.replace('_', ' ')}"))
