"""The channel service's metric series: deliveries, rejections, SDS events, gossip bytes."""

from __future__ import annotations

from collections.abc import Mapping

from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from sync.sds import (
    Acknowledged,
    DependencyLost,
    PossiblyAcknowledged,
    RepairAnswered,
    ResendExhausted,
    SdsChannel,
)

__all__ = ["CHANNEL_METRICS", "EVENT_COUNTERS", "describe_channel_metrics"]

# SDS events that only move a counter.
EVENT_COUNTERS: dict[type, str] = {
    Acknowledged: "sds_acknowledged_total",
    PossiblyAcknowledged: "sds_possibly_acknowledged_total",
    DependencyLost: "sds_dependencies_lost_total",
    ResendExhausted: "sds_resend_exhausted_total",
    RepairAnswered: "sds_repairs_answered_total",
}


CHANNEL_METRICS = {
    "events_delivered_total": "Events delivered into a channel's causal log (own and received), "
                              "by channel",
    "events_published_total": "Events published through this node's API, by channel",
    "events_rejected_total": "Events from peers refused (bad signature, wrong network, foreign "
                             "sender, malformed...), by reason",
    "sds_missing_total": "Causal dependencies found missing (each is then fetched by id)",
    "sds_acknowledged_total": "Own messages acknowledged by a peer's causal history",
    "sds_possibly_acknowledged_total": "Own messages seen in peers' bloom filters (probably "
                                       "acknowledged)",
    "sds_resend_exhausted_total": "Own messages given up after sds.max_resends resends",
    "sds_repairs_requested_total": "Repair requests sent (SDS-R), one per message id asked for "
                                   "in each outgoing message",
    "sds_repairs_answered_total": "Messages this node rebroadcast because a peer asked (SDS-R)",
    "sds_dependencies_lost_total": "Dependencies still missing after sds.lost_timeout_s, "
                                   "declared lost",
    "gossip_bytes_sent_total": "Bytes of gossip messages this node published",
    "gossip_paced_seconds_total": "Seconds our gossip waited to keep within our peers' "
                                  "per-publisher budget (p2p.gossip_peer_rate/_burst)",
    "gossip_bytes_received_total": "Bytes of gossip messages received",
    "sds_evicted_total": "Entries dropped or refused by a bounded SDS buffer (waiting, missing) "
                         "to stay within its limits, by buffer",
    "events_store_failed_total": "Delivered events the database could not store (delivery "
                                 "undone), by channel",
    "sds_clock_recovered_total": "Channels whose persisted Lamport clock broke the clock rule at "
                                 "start-up",
    "sds_unsigned_accepted_total": "Unsigned messages taken on a channel of the waku SDS profile "
                                   "(docs/interop.md), by channel",
    "sds_store_lookups_total": "Questions SDS channels asked the database about delivered ids "
                               "older than the window they keep in memory (sds.delivered_window)",
}
UNLABELLED_FROM_ZERO = frozenset(
    n for n in CHANNEL_METRICS
    if n.startswith(("sds_", "gossip_"))
    and n not in ("sds_evicted_total", "sds_resends_total", "sds_unsigned_accepted_total")
)


def describe_channel_metrics(metrics: Metrics, channels: Mapping[str, SdsChannel],
                             store: EventStore) -> None:
    """Declare the series; the computed ones read ``channels`` (filled in later) when scraped."""
    for name, help_text in CHANNEL_METRICS.items():
        metrics.describe(name, "counter", help_text)
        if name in UNLABELLED_FROM_ZERO:  # for rate() from the first scrape
            metrics.inc(name, 0)
    metrics.counter_fn("sds_resends_total",
                       lambda: float(sum(ch.layers.stats.resends for ch in channels.values())),
                       "Own messages sent again because no acknowledgement came in time")
    metrics.counter_fn(
        "sds_fetched_waiting_total",
        lambda: float(sum(ch.layers.stats.fetched_waiting for ch in channels.values())),
        "Fetched events (Recon, fetch by id) that had to wait in SDS's dependency buffer: "
        "0 while fetches come in causal order")
    metrics.counter_fn(
        "events_duplicate_total",
        lambda: float(store.duplicate_events
                      + sum(ch.layers.stats.duplicates_received for ch in channels.values())),
        "Events received again after they were delivered (resends, repairs, one event by "
        "gossip and by Recon): dropped, not stored twice")
    for bound, what in (("requester", "the requester was over sds.repair_requester_bytes "
                                      "(penalised as flood)"),
                        ("cooldown", "the message was rebroadcast less than "
                                     "sds.repair_cooldown_s ago"),
                        ("total", "all answers were over sds.repair_total_bytes")):
        metrics.counter_fn(
            f"sds_repairs_refused_{bound}_total",
            lambda bound=bound: float(sum(ch.layers.repair.refusals[bound]  # type: ignore[misc]
                                          for ch in channels.values())),
            f"Repair requests (SDS-R) not answered because {what}")
    metrics.counter_fn(
        "sds_repair_requests_unsigned_total",
        lambda: float(sum(ch.layers.stats.repair_unsigned_ignored for ch in channels.values())),
        "Repair requests ignored because their message's sender did not sign them (attached "
        "by a relay or a replay)")
    metrics.counter_fn(
        "sds_repair_requests_stale_total",
        lambda: float(sum(ch.layers.stats.repair_stale_ignored for ch in channels.values())),
        "Repair requests ignored because they rode on a message older than "
        "sds.repair_t_min_s (a replay)")
    metrics.describe_histogram("publish_commit_seconds",
                               "Time from a local publish to its event being committed to "
                               "the database")
