"""What each peer did lately, for ``peers --json``, ``status --watch`` and ``/metrics``: its
last Recon session (when, role, outcome, events fetched and served) and when we last saw it.

Bounded: at most ``max_peers`` peers are remembered (the longest-unseen forgotten first), and
``/metrics`` carries per-peer series for at most ``max_series`` of them (connected peers
first, most recently active first) so that the label set stays small whatever the churn.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from node.clock import Clock
from node.p2p import ConnectedPeer
from node.telemetry.metrics import Metrics

__all__ = ["PEER_SERIES", "LastSession", "PeerActivity", "path_of"]

PEER_SERIES = {
    "peer_rtt_seconds": "Round-trip time to a connected peer (libp2p ping), by peer and path "
                        "(direct or relayed)",
    "peer_last_seen_timestamp_seconds": "When a peer was last connected (Unix time), by peer",
    "peer_last_recon_timestamp_seconds": "When the last Recon session with a peer ended (Unix "
                                         "time), by peer and outcome",
    "peer_last_recon_events_fetched": "Events fetched in the last Recon session with a peer",
    "peer_last_recon_events_served": "Events served in the last Recon session with a peer",
}


def path_of(address: str | None) -> str:
    """``relayed`` when the connection runs through a circuit relay, else ``direct``."""
    return "relayed" if address and "/p2p-circuit" in address else "direct"


@dataclass(frozen=True)
class LastSession:
    at: float  # Unix time the session ended
    role: str  # initiator or responder
    outcome: str  # ok, or the error kind
    fetched: int
    served: int


class PeerActivity:
    def __init__(self, max_peers: int = 4096, max_series: int = 32, *, clock: Clock) -> None:
        self.clock = clock  # wall(): Unix times, shown to people
        self.max_peers = max_peers
        self.max_series = max_series
        self.sessions: dict[str, LastSession] = {}
        self.last_seen: dict[str, float] = {}

    def session(self, peer: str, role: str, outcome: str, fetched: int = 0,
                served: int = 0) -> None:
        self.sessions.pop(peer, None)
        self.sessions[peer] = LastSession(self.clock.wall(), role, outcome, fetched, served)
        self.seen(peer)
        while len(self.sessions) > self.max_peers:
            del self.sessions[next(iter(self.sessions))]

    def seen(self, peer: str, at: float | None = None) -> None:
        self.last_seen.pop(peer, None)
        self.last_seen[peer] = self.clock.wall() if at is None else at
        while len(self.last_seen) > self.max_peers:
            del self.last_seen[next(iter(self.last_seen))]

    def describe(self, peer: str, connected: bool) -> dict[str, Any]:
        session = self.sessions.get(peer)
        return {"last_seen": self.clock.wall() if connected else self.last_seen.get(peer),
                "last_recon": asdict(session) if session is not None else None}

    def export(self, metrics: Metrics, connected: Iterable[ConnectedPeer]) -> None:
        """Replace the per-peer series with those of the ``max_series`` most relevant peers."""
        for name in PEER_SERIES:
            metrics.clear(name)
        now = self.clock.wall()
        live = {p.peer_id: p for p in connected}
        ranked = sorted(set(live) | set(self.sessions),
                        key=lambda p: (p not in live, -self.last_seen.get(p, 0.0), p))
        for peer in ranked[: self.max_series]:
            label = peer[-12:]  # short, as `peers` prints them; unique enough for a dashboard
            info = live.get(peer)
            if info is not None and info.latency_s is not None:
                metrics.set("peer_rtt_seconds", info.latency_s, peer=label,
                            path=path_of(info.address))
            metrics.set("peer_last_seen_timestamp_seconds",
                        now if info is not None else self.last_seen.get(peer, 0.0), peer=label)
            session = self.sessions.get(peer)
            if session is not None:
                metrics.set("peer_last_recon_timestamp_seconds", session.at, peer=label,
                            outcome=session.outcome)
                metrics.set("peer_last_recon_events_fetched", session.fetched, peer=label)
                metrics.set("peer_last_recon_events_served", session.served, peer=label)
