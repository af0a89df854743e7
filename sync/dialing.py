"""Which known peers to dial, and when: the redial back-off, sans-IO.

A node keeps a connection to every peer it knows (bootstrap addresses, ``join``, stored across
restarts). A peer that is not connected is dialled when its back-off has expired; each failed
dial doubles the wait (``MIN_BACKOFF_S`` * 2^failures, at most ``MAX_BACKOFF_S``), a
connection resets it. A banned peer is not dialled; it is looked at again after the usual
wait. ``now`` is the caller's monotonic clock in seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

__all__ = ["MAX_BACKOFF_S", "MIN_BACKOFF_S", "DialPlan", "DialSchedule", "KnownPeer",
           "peer_id_of_addr"]

MIN_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
_MAX_DOUBLINGS = 10


def peer_id_of_addr(multiaddr: str) -> str | None:
    """The peer id a ``.../p2p/<peer id>`` multiaddr ends in, or None."""
    parts = multiaddr.rstrip("/").split("/")
    return parts[-1] if len(parts) >= 2 and parts[-2] == "p2p" else None


@dataclass
class KnownPeer:
    peer_id: str
    addr: str
    failures: int = 0
    next_attempt: float = 0.0  # the caller's monotonic clock


@dataclass(frozen=True)
class DialPlan:
    """Peers to dial now, and when to look again at the latest (sooner if poked)."""

    dial: list[KnownPeer] = field(default_factory=list)
    wake_at: float = 0.0


class DialSchedule:
    """The known peers of one node (``own_peer_id`` is never one of them)."""

    def __init__(self, own_peer_id: str) -> None:
        self.own_peer_id = own_peer_id
        self.known: dict[str, KnownPeer] = {}

    def remember(self, addr: str) -> KnownPeer | None:
        """Add a peer, or give a known one its new address; None for our own or a bad one."""
        peer_id = peer_id_of_addr(addr)
        if peer_id is None or peer_id == self.own_peer_id:
            return None
        peer = self.known.get(peer_id)
        if peer is None:
            peer = self.known[peer_id] = KnownPeer(peer_id, addr)
        else:
            peer.addr = addr
        return peer

    def forget(self, peer_id: str) -> bool:
        return self.known.pop(peer_id, None) is not None

    def plan(self, now: float, connected: Collection[str],
             is_banned: Callable[[str], bool]) -> DialPlan:
        """Connected peers have their back-off reset; the others are due once it expired."""
        dial: list[KnownPeer] = []
        wake_at = now + MAX_BACKOFF_S
        for peer in self.known.values():
            if peer.peer_id in connected:
                peer.failures = 0
                continue
            if is_banned(peer.peer_id):
                continue  # looked at again after the usual wait, not dialled while banned
            if peer.next_attempt <= now:
                dial.append(peer)
            wake_at = min(wake_at, max(peer.next_attempt, now + MIN_BACKOFF_S))
        return DialPlan(dial, wake_at)

    def failed(self, peer: KnownPeer, now: float) -> float:
        """A dial failed: the seconds until the next attempt."""
        peer.failures += 1
        delay = min(MAX_BACKOFF_S, MIN_BACKOFF_S * 2.0 ** min(peer.failures, _MAX_DOUBLINGS))
        peer.next_attempt = now + delay
        return delay

    @staticmethod
    def connected(peer: KnownPeer) -> None:
        peer.failures = 0
