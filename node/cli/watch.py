"""``syncnode status --watch``: rates redrawn in place, like ``top``.

Each refresh reads ``/metrics``, ``/v1/status`` and ``/v1/channels`` and shows the change per
second since the previous refresh. On a terminal the screen is redrawn; otherwise (a pipe, a
log file) one line per refresh is written, as ``top -b`` does.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from node.cli.common import EXIT_USAGE, ApiClient, CliError, client_for
from node.cli.node_commands import peer_summary

__all__ = ["parse_metrics", "watch_status"]

# The counters behind each rate (names without the syncnode_ prefix).
STORED = "syncnode_events_stored_total"
PUBLISHED = "syncnode_events_published_total"
RECON = "syncnode_recon_sessions_total"
PEERS = "syncnode_peers_connected"
FETCHED = "syncnode_recon_events_fetched_total"
_PEER_ROWS = 12


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format: each metric's samples summed over their labels."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        try:
            totals[name] = totals.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return totals


def _sample(client: ApiClient) -> dict[str, Any]:
    metrics = parse_metrics(str(client.get("/metrics")))
    status = client.get("/v1/status")
    channels = client.get("/v1/channels")["channels"]
    peers = client.get("/v1/peers")
    return {
        "peers": peers["connected"],
        "address_book": status.get("address_book", 0),
        "t": time.monotonic(),
        "metrics": metrics,
        "events": status.get("events", 0),
        "peer_id": status.get("peer_id", "?"),
        # Events this node knows it lacks: SDS dependencies missing or waiting for delivery.
        "lag": sum(c.get("missing", 0) + c.get("waiting", 0) for c in channels),
        "sync": status.get("sync") or {},
    }


def _rates(prev: dict[str, Any], now: dict[str, Any]) -> dict[str, float]:
    span = max(float(now["t"] - prev["t"]), 1e-6)

    def rate(name: str) -> float:
        delta: float = now["metrics"].get(name, 0.0) - prev["metrics"].get(name, 0.0)
        return delta / span

    stored, published = rate(STORED), rate(PUBLISHED)
    return {"in": max(stored - published, 0.0), "out": published,
            "recon": rate(RECON), "fetched": rate(FETCHED)}


def _screen(now: dict[str, Any], rates: dict[str, float]) -> list[str]:
    peers = int(now["metrics"].get(PEERS, 0))
    return [
        f"syncnode {now['peer_id']}   {time.strftime('%H:%M:%S')}",
        "",
        f"  events stored      {now['events']:>12,}",
        f"  events in   /s     {rates['in']:>12.1f}   (from peers: gossip and Recon)",
        f"  events out  /s     {rates['out']:>12.1f}   (published here)",
        f"  recon sessions /s  {rates['recon']:>12.2f}   ({rates['fetched']:.1f} events fetched/s)",
        f"  peers              {peers:>12}   (address book: {now['address_book']})",
        f"  lag (events)       {now['lag']:>12}   (missing or waiting for dependencies)",
        f"  sync               {now['sync'].get('text', 'unknown')}",
        "",
        *[f"  {p['peer_id'][-12:]}  {peer_summary(p)}" for p in now["peers"][:_PEER_ROWS]],
    ]


def watch_status(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise CliError("--interval must be > 0", code=EXIT_USAGE)
    client = client_for(args)
    tty = sys.stdout.isatty()
    prev = _sample(client)
    if tty:
        sys.stdout.write("\x1b[2J")
    shown = 0
    while args.count is None or shown < args.count:
        time.sleep(args.interval)
        now = _sample(client)
        rates = _rates(prev, now)
        if tty:
            # Home, draw, clear the rest: no flicker, like top.
            sys.stdout.write("\x1b[H" + "\x1b[K\n".join(_screen(now, rates)) + "\x1b[K\n\x1b[J")
        else:
            sys.stdout.write(
                f"{time.strftime('%H:%M:%S')} events={now['events']} in/s={rates['in']:.1f} "
                f"out/s={rates['out']:.1f} recon/s={rates['recon']:.2f} "
                f"peers={int(now['metrics'].get(PEERS, 0))} book={now['address_book']} "
                f"lag={now['lag']} sync={now['sync'].get('state', 'unknown')} "
                f"behind={now['sync'].get('behind', 0)}\n")
        sys.stdout.flush()
        prev = now
        shown += 1
    return 0
