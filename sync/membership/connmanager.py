"""The connection manager's decisions, sans-IO: admit an inbound connection or not, close idle
ones, prune above the high watermark, dial up to the low watermark.

A connection is *idle* until its peer speaks one of our protocols (opens a stream we serve, or
answers one we open; GossipSub counts): a peer that holds connections and never speaks is
closed after ``idle_timeout_s``. Inbound connections are limited per IP address (a full IP
makes room by evicting its longest-idle connection, if it has one) and per identity (at most
``inbound_per_peer_per_min`` inbound connections a minute). Pruning keeps *protected* peers
(the caller's: GossipSub mesh members, peers in a Recon session) and peers younger than
``grace_s``, and drops the least useful first: idle ones, then inbound, then the newest; it
never leaves fewer than ``low_watermark`` of the connections we dialled (an eclipse by
identities holding protected inbound connections would otherwise prune them all).

Time is the caller's monotonic ``now`` in seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

from sync.membership.addrbook import require_counts

__all__ = ["Admission", "ConnLimits", "ConnState", "ConnectionManager", "Housekeeping"]

_RATE_WINDOW_S = 60.0


@dataclass(frozen=True)
class ConnLimits:
    low_watermark: int = 8
    high_watermark: int = 32
    grace_s: float = 10.0
    idle_timeout_s: float = 20.0
    max_inbound: int = 200
    max_inbound_per_ip: int = 64
    inbound_per_peer_per_min: int = 60
    max_tracked_peers: int = 10_000

    def __post_init__(self) -> None:
        if not 1 <= self.low_watermark <= self.high_watermark:
            raise ValueError("need 1 <= low_watermark <= high_watermark")
        require_counts(self, "max_inbound", "max_inbound_per_ip", "inbound_per_peer_per_min",
                       "max_tracked_peers")
        if self.grace_s < 0 or self.idle_timeout_s <= 0:
            raise ValueError("grace_s must be >= 0 and idle_timeout_s > 0")


@dataclass
class ConnState:
    peer_id: str
    ip: str | None
    inbound: bool
    opened: float
    spoke: bool = False


@dataclass(frozen=True)
class Admission:
    admit: bool
    reason: str = ""  # why refused: "peer_rate" or "ip_limit" or "inbound_limit"
    evict: tuple[str, ...] = ()  # idle peers to disconnect to make room


@dataclass(frozen=True)
class Housekeeping:
    close_idle: list[str] = field(default_factory=list)
    prune: list[str] = field(default_factory=list)
    dial: int = 0  # how many more peers to dial to reach the low watermark


class ConnectionManager:
    def __init__(self, limits: ConnLimits | None = None) -> None:
        self.limits = limits or ConnLimits()
        self.conns: dict[str, ConnState] = {}
        self._inbound_times: dict[str, deque[float]] = {}

    def admit_inbound(self, peer_id: str, ip: str | None, now: float) -> Admission:
        """A peer finished the handshake of an inbound connection: let it in?"""
        times = self._inbound_times.get(peer_id)
        if times is None:
            if len(self._inbound_times) >= self.limits.max_tracked_peers:
                self._forget_quiet(now)
            times = self._inbound_times[peer_id] = deque()
        while times and times[0] <= now - _RATE_WINDOW_S:
            times.popleft()
        if len(times) >= self.limits.inbound_per_peer_per_min:
            return Admission(False, "peer_rate")
        evict: list[str] = []
        existing = self.conns.get(peer_id)
        same_ip = [c for c in self.conns.values() if c.inbound and ip is not None and c.ip == ip
                   and c.peer_id != peer_id]
        if len(same_ip) >= self.limits.max_inbound_per_ip:
            victim = self._idle_victim(same_ip)
            if victim is None:
                return Admission(False, "ip_limit")
            evict.append(victim)
        inbound = [c for c in self.conns.values() if c.inbound and c.peer_id not in evict
                   and c.peer_id != peer_id]
        if existing is None and len(inbound) >= self.limits.max_inbound:
            victim = self._idle_victim(inbound)
            if victim is None:
                return Admission(False, "inbound_limit")
            evict.append(victim)
        times.append(now)
        return Admission(True, evict=tuple(evict))

    @staticmethod
    def _idle_victim(conns: list[ConnState]) -> str | None:
        """The longest-idle connection. The newcomer is always the youngest, so an honest
        peer is evicted only if a whole IP's worth of newcomers arrive before it speaks (it
        does within a second); an age floor would instead let an attacker who keeps
        connecting hold every slot of its IP young, and unevictable."""
        idle = [c for c in conns if not c.spoke]
        return min(idle, key=lambda c: (c.opened, c.peer_id)).peer_id if idle else None

    def _forget_quiet(self, now: float) -> None:
        for peer in [p for p, t in self._inbound_times.items()
                     if not t or t[-1] <= now - _RATE_WINDOW_S]:
            del self._inbound_times[peer]
        if len(self._inbound_times) >= self.limits.max_tracked_peers:
            self._inbound_times.clear()  # a flood of identities: start the window afresh

    def opened(self, peer_id: str, ip: str | None, inbound: bool, now: float) -> None:
        if peer_id not in self.conns:
            self.conns[peer_id] = ConnState(peer_id, ip, inbound, now)

    def closed(self, peer_id: str) -> None:
        self.conns.pop(peer_id, None)

    def spoke(self, peer_id: str) -> None:
        conn = self.conns.get(peer_id)
        if conn is not None:
            conn.spoke = True

    def housekeeping(self, now: float, protected: Collection[str] = ()) -> Housekeeping:
        limits = self.limits
        idle = sorted(c.peer_id for c in self.conns.values()
                      if not c.spoke and now - c.opened >= limits.idle_timeout_s)
        remaining = [c for c in self.conns.values() if c.peer_id not in idle]
        excess = len(remaining) - limits.high_watermark
        prune: list[str] = []
        if excess > 0:
            candidates = [c for c in remaining if c.peer_id not in protected
                          and now - c.opened >= limits.grace_s]
            candidates.sort(key=lambda c: (c.spoke, not c.inbound, -c.opened, c.peer_id))
            # Never below low_watermark connections we dialled ourselves: identities that
            # came to us and hold protected connections (mesh members, sessions) would
            # otherwise have every peer we chose pruned, and the count kept us from dialling.
            outbound = sum(1 for c in remaining if not c.inbound)
            for c in candidates:
                if len(prune) >= excess:
                    break
                if not c.inbound:
                    if outbound <= limits.low_watermark:
                        continue
                    outbound -= 1
                prune.append(c.peer_id)
        dial = max(0, limits.low_watermark - (len(remaining) - len(prune)))
        return Housekeeping(close_idle=idle, prune=prune, dial=dial)
