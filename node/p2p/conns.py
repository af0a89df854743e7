"""The host side of the connection manager (``sync.membership.ConnectionManager``): admits
inbound connections after the Noise handshake, notes who speaks our protocols, and counts.

The decisions are the sans-IO core's; this module feeds it libp2p's events. The peers it
evicts go into a queue made before it (``open_host``): the host that disconnects them is built
on the libp2p host this guard gates, so it cannot be given to the guard.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import trio

from node.clock import Clock
from sync.membership import ConnectionManager, ConnLimits

__all__ = ["Heard", "InboundGuard", "ip_of"]

logger = logging.getLogger("node.p2p")
_MAX_HANDSHAKES = 1024


def ip_of(address: str | None) -> str | None:
    """The IP of an ``/ip4|ip6/HOST/...`` multiaddr (None for others, e.g. relayed ones)."""
    if not address or "/p2p-circuit" in address:
        return None
    parts = address.split("/")
    return parts[2] if len(parts) > 2 and parts[1] in ("ip4", "ip6") else None


#: Told ``(peer, now)`` each time a peer proves alive on its connection: the liveness rule's
#: evidence (``sync.membership.Liveness.heard``).
Heard = Callable[[str, float], None]


class InboundGuard:
    """One per host. ``evictions``: where the peers evicted for a newcomer go (the host reads
    them and disconnects each); ``heard``: see :meth:`heard_from`. ``clock`` is the host's:
    membership's housekeeping asks the manager with the same ``now``."""

    def __init__(self, limits: ConnLimits | None, clock: Clock, *,
                 evictions: trio.MemorySendChannel[str] | None = None,
                 heard: Heard | None = None) -> None:
        self.manager = ConnectionManager(limits)
        self.clock = clock
        self._evictions = evictions
        self._heard = heard
        self.refused: Counter[str] = Counter()  # by reason: peer_rate, ip_limit, inbound_limit
        self.evicted = 0
        # When each peer last completed a Noise handshake inbound (admitted or not): the
        # reachability driver checks that a dial-back a peer claims really reached us.
        self.handshakes: dict[str, float] = {}

    def admit(self, peer_id: str, ip: str | None) -> str | None:
        """Called by the admission gate once Noise authenticated ``peer_id``: None to let it
        in, else why not."""
        now = self.clock.now()
        self.handshakes.pop(peer_id, None)
        self.handshakes[peer_id] = now
        if len(self.handshakes) > _MAX_HANDSHAKES:
            del self.handshakes[next(iter(self.handshakes))]
        decision = self.manager.admit_inbound(peer_id, ip, now)
        if not decision.admit:
            self.refused[decision.reason] += 1
            logger.info("refused inbound connection from %s (%s): %s", peer_id, ip,
                        decision.reason)
            return decision.reason
        for victim in decision.evict:
            self.evicted += 1
            self.manager.closed(victim)
            if self._evictions is not None:
                self._evictions.send_nowait(victim)  # unbounded: never blocks the handshake
        return None

    def opened(self, peer_id: str, address: str | None, inbound: bool) -> None:
        self.manager.opened(peer_id, ip_of(address), inbound, self.clock.now())

    def closed(self, peer_id: str) -> None:
        self.manager.closed(peer_id)

    def spoke(self, peer_id: str) -> None:
        """``peer_id`` speaks our protocols (the manager's idle rule spares it)."""
        self.manager.spoke(peer_id)

    def heard_from(self, peer_id: str) -> None:
        """``peer_id`` spoke to us on its connection (a stream it opened or accepted, a relay
        reservation or circuit): it is not idle, and it is alive (``heard``)."""
        self.manager.spoke(peer_id)
        if self._heard is not None:
            self._heard(peer_id, self.clock.now())
