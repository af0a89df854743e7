"""The peers' scores (:mod:`sync.peerscore`) on the host's clock, counted.

Built before the host, which is opened with them (``open_host(scoring=...)``): the host charges
the transport's own violations to them and carries out the bans they call for; the services
above charge theirs through ``node.p2p.standing.PeerStanding``, built after the host.
"""

from __future__ import annotations

import logging

from node.clock import Clock
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.peerscore import PeerScores, ScoreConfig

__all__ = ["PeerScoring"]

log = logging.getLogger("syncnode.standing")


class PeerScoring:
    """The peers' scores, counted: ``charge`` says how long to ban a peer it just banned."""

    def __init__(self, metrics: Metrics, config: ScoreConfig, clock: Clock) -> None:
        self.clock = clock
        self.metrics = metrics
        self.scores = PeerScores(config)
        metrics.describe("peer_penalties_total", "counter",
                         "Penalties against peers' scores, by reason")
        metrics.describe("peer_bans_total", "counter",
                         "Peers banned (disconnected and refused) for misbehaviour")
        metrics.inc("peer_bans_total", 0)
        metrics.gauge_fn("peer_scores_tracked", lambda: float(len(self.scores)),
                         "Peers whose score is remembered")

    def charge(self, peer: str, reason: str, count: float = 1.0) -> float | None:
        """Lower ``peer``'s score; the seconds to ban it for when this banned it, else None."""
        now = self.clock.now()
        self.metrics.inc("peer_penalties_total", reason=reason)
        if not self.scores.penalise(peer, reason, now, count):
            return None
        seconds = self.scores.banned_until(peer) - now
        self.metrics.inc("peer_bans_total")
        log.warning("peer banned", extra=kv(peer=peer, reason=reason, seconds=round(seconds, 1)))
        return seconds

    def score(self, peer: str) -> float:
        return self.scores.score(peer, self.clock.now())
