"""The Recon service's metric series: session counters, durations, claims and key store."""

from __future__ import annotations

from collections.abc import Callable

from node.telemetry.metrics import Metrics
from sync.recon import SummaryKeyStore
from sync.transfer import ClaimTable, RangeBacklog

__all__ = ["RECON_METRICS", "describe_recon_metrics"]

RECON_METRICS = {
    "recon_sessions_total": "Recon sessions completed, by role (initiator or responder)",
    "recon_sessions_declined_total": "Recon sessions declined because one with the same peer "
                                     "was already running, by role",
    "recon_events_fetched_total": "Events received from peers through Recon",
    "recon_events_stored_total": "Events fetched through Recon that were new to the database "
                                 "(fetched / stored is 1 when each event is fetched once)",
    "recon_events_served_total": "Events sent to peers through Recon",
    "recon_errors_total": "Recon sessions that failed (the peer is backed off), by error kind",
    "recon_missing_dropped_total": "Missing keys a session could not track (bounded list full)",
    "recon_protocol_errors_total": "Recon sessions a peer broke the protocol in, by reason",
    "recon_prompts_total": "Prompt sessions asked for (a new connection, a gap its events "
                           "showed), by reason and outcome (at_once, or deferred by "
                           "recon.prompt_interval_s)",
}


def describe_recon_metrics(metrics: Metrics, claims: Callable[[], ClaimTable],
                           keys: Callable[[], SummaryKeyStore],
                           backlog: Callable[[], RangeBacklog],
                           open_sessions: Callable[[], int]) -> None:
    """Declare the series; the gauges read ``claims()``, ``keys()``, ``backlog()`` and
    ``open_sessions()`` when scraped (the key store is replaced once it is loaded)."""
    for name, help_text in RECON_METRICS.items():
        metrics.describe(name, "counter", help_text)
    metrics.describe_histogram(
        "recon_session_seconds",
        "Duration of completed Recon sessions (reconcile, fetch and serve), by role")
    metrics.gauge_fn("recon_sessions_open", lambda: float(open_sessions()),
                     "Recon sessions begun and not yet ended (the core holds each one's "
                     "reconciliation until then)")
    metrics.gauge_fn("recon_claims", lambda: float(len(claims())),
                     "Missing keys claimed by a session fetching them")
    metrics.gauge_fn("recon_claims_held", lambda: float(claims().held),
                     "Fetched keys waiting for their dependencies or the commit (held "
                     "until the store is done with them)")
    metrics.counter_fn("recon_backlog_ranges_taken_total",
                       lambda: float(backlog().taken_total),
                       "Sessions that reconciled one backlog range instead of everything")
    metrics.gauge_fn("recon_keystore_buckets", lambda: float(len(keys().summary)),
                     "Buckets of the Recon key store's in-memory summary")
    metrics.counter_fn("recon_keystore_reads_total", lambda: float(keys().reads),
                       "Buckets of keys the Recon key store read from the database")
