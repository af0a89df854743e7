"""Peer standing in the running node: the :mod:`sync.peerscore` core on the host's clock (its
``now()``: the ban list it fills reads the same one), with bans enforced by the p2p layer
(disconnect, refuse connections and streams) and counted.
"""

from __future__ import annotations

import logging

from node.clock import Clock
from node.config.settings import PeersSection
from node.p2p.host import P2PHost
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.peerscore import PeerScores, ScoreConfig

__all__ = ["PeerStanding", "score_config"]

log = logging.getLogger("syncnode.standing")


def score_config(section: PeersSection) -> ScoreConfig:
    return ScoreConfig(
        ban_threshold=section.ban_threshold,
        half_life_s=section.score_half_life_s,
        ban_s=section.ban_s,
        max_ban_s=max(section.max_ban_s, section.ban_s),
        max_peers=section.max_tracked,
    )


class PeerStanding:
    """``penalise(peer, reason)`` from any service; a ban disconnects and refuses the peer."""

    def __init__(self, host: P2PHost, metrics: Metrics, config: ScoreConfig,
                 clock: Clock) -> None:
        self.host = host
        self.clock = clock
        self.metrics = metrics
        self.scores = PeerScores(config)
        metrics.describe("peer_penalties_total", "counter",
                         "Penalties against peers' scores, by reason")
        metrics.describe("peer_bans_total", "counter",
                         "Peers banned (disconnected and refused) for misbehaviour")
        metrics.inc("peer_bans_total", 0)
        metrics.gauge_fn("peers_banned", lambda: float(self.host.bans.active()),
                         "Peers refused right now for misbehaviour")
        metrics.gauge_fn("peer_scores_tracked", lambda: float(len(self.scores)),
                         "Peers whose score is remembered")
        host.on_misbehaved = self.penalise  # the transport's own violations (Yamux windows)

    def penalise(self, peer: str, reason: str, count: float = 1.0) -> bool:
        """Lower ``peer``'s score; returns True when this banned it."""
        if not peer or peer == self.host.peer_id:
            return False
        now = self.clock.now()
        self.metrics.inc("peer_penalties_total", reason=reason)
        if not self.scores.penalise(peer, reason, now, count):
            return False
        seconds = self.scores.banned_until(peer) - now
        self.metrics.inc("peer_bans_total")
        log.warning("peer banned", extra=kv(peer=peer, reason=reason, seconds=round(seconds, 1)))
        self.host.ban(peer, seconds)
        return True

    def is_banned(self, peer: str) -> bool:
        return self.host.is_banned(peer)

    def score(self, peer: str) -> float:
        return self.scores.score(peer, self.clock.now())
