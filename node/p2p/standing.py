"""Peer standing in the running node: the :mod:`sync.peerscore` core on the host's clock (its
``now()``: the ban list it fills reads the same one), with bans enforced by the p2p layer
(disconnect, refuse connections and streams) and counted.

The scores (``node.p2p.scoring.PeerScoring``) are built before the host, which is opened with
them: it charges the transport's own violations (a Yamux window overrun) and carries out the
bans. The services above charge theirs through ``PeerStanding``, built on the running host.
"""

from __future__ import annotations

from node.config.settings import PeersSection
from node.p2p.host import P2PHost
from node.p2p.scoring import PeerScoring
from sync.peerscore import ScoreConfig

__all__ = ["PeerStanding", "score_config"]


def score_config(section: PeersSection) -> ScoreConfig:
    return ScoreConfig(
        ban_threshold=section.ban_threshold,
        half_life_s=section.score_half_life_s,
        ban_s=section.ban_s,
        max_ban_s=max(section.max_ban_s, section.ban_s),
        max_peers=section.max_tracked,
    )


class PeerStanding:
    """``penalise(peer, reason)`` from any service; a ban disconnects and refuses the peer.
    It charges the scores the host was opened with (``open_host(scoring=...)``): the host's
    own charges and the services' add up."""

    def __init__(self, host: P2PHost) -> None:
        if host.scoring is None:
            raise ValueError("the host was opened without scores (open_host(scoring=...))")
        self.host = host
        self.scoring: PeerScoring = host.scoring
        self.scoring.metrics.gauge_fn("peers_banned", lambda: float(self.host.bans.active()),
                                      "Peers refused right now for misbehaviour")

    def penalise(self, peer: str, reason: str, count: float = 1.0) -> bool:
        """Lower ``peer``'s score; returns True when this banned it."""
        return self.host.penalise(peer, reason, count)

    def is_banned(self, peer: str) -> bool:
        return self.host.is_banned(peer)

    def score(self, peer: str) -> float:
        return self.scoring.score(peer)
