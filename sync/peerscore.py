"""Per-peer standing: penalties that decay, bans that back off, budgets that refill.

Modelled on GossipSub v1.1 peer scoring, reduced to what a sync node needs: every peer starts
at 0; misbehaviour subtracts a weight per reason; the score decays towards 0 exponentially
(``half_life_s``) so an honest peer that tripped once recovers; a score at or below
``ban_threshold`` bans the peer until ``now + ban_s * 2**(bans-1)`` (capped by ``max_ban_s``),
so a peer that comes back and misbehaves again is refused for longer each time.

The table is bounded: at most ``max_peers`` entries. Entries whose score decayed back to about
0 and that are not banned carry no information and are pruned first; when the table is still
full, the entry with the best (highest) score that is not banned makes room. A flood of fresh
peer ids therefore costs a bounded amount of memory and never evicts a current ban.

Sans-IO: ``now`` (seconds, any monotonic origin) is passed into every call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from sync.errors import ErrorKind

__all__ = [
    "DEFAULT_WEIGHTS",
    "KIND_PENALTIES",
    "PeerBuckets",
    "PeerScores",
    "ScoreConfig",
    "TokenBucket",
    "penalty_of",
]

# Weights per reason (subtracted from the score). A ban threshold of -100 means: one
# protocol violation costs a third of the way to a ban; withholding what a peer advertised
# (claim expiry) costs a quarter; an invalid event (bad id/signature) half.
DEFAULT_WEIGHTS: Mapping[str, float] = {
    "protocol": 30.0,  # malformed frame, bad key list, unrequested event
    "withheld": 25.0,  # advertised keys and did not deliver them
    "short_answer": 25.0,  # answered a WANT with fewer events than it listed
    "invalid_event": 50.0,  # bad signature, bad id, over the size limit
    "rejected_event": 5.0,  # valid but refused by policy (clock, roles, closed group)
    "flood": 10.0,  # went over a rate budget
    "over_budget": 20.0,  # asked for work far beyond its work budget (sync.workbudget)
    "busy": 2.0,  # too many concurrent streams
    "takeover": 50.0,  # signed a declaration that would take a settled table over
    "dialback_lie": 50.0,  # named an address it cannot have seen us on (sync.reachability)
    # Claimed a dial-back that never reached our listener: a lie, or our own listener was
    # too busy to take it (an inbound flood), so it weighs less.
    "dialback_unverified": 10.0,
}

#: What a rejected input of each ``ErrorKind`` costs the peer that sent it: a broken protocol
#: or bad batch the ``protocol`` weight, invalid bytes or signatures ``invalid_event``, a flood
#: its own weight, anything valid but refused by policy (clock, roles, closed group, a malformed
#: field an honest relay could pass on) the least. Every kind has an entry (a test checks it).
KIND_PENALTIES: Mapping[ErrorKind, str] = {
    ErrorKind.MALFORMED: "protocol",
    ErrorKind.OVER_LIMIT: "protocol",
    ErrorKind.UNREQUESTED: "protocol",
    ErrorKind.BAD_BATCH: "protocol",
    ErrorKind.UNDECODABLE: "invalid_event",
    ErrorKind.BAD_SIGNATURE: "invalid_event",
    ErrorKind.UNSIGNED: "invalid_event",
    ErrorKind.BAD_ID: "invalid_event",
    ErrorKind.TOO_LARGE: "invalid_event",
    ErrorKind.INVALID_EVENTS: "invalid_event",
    ErrorKind.OVER_BUDGET: "flood",
    ErrorKind.MALFORMED_EVENT: "rejected_event",
    ErrorKind.NOT_MEMBER: "rejected_event",
    ErrorKind.NOT_WRITER: "rejected_event",
    ErrorKind.LAMPORT_RANGE: "rejected_event",
    ErrorKind.LAMPORT_AHEAD: "rejected_event",
    ErrorKind.UNKNOWN_CHANNEL: "rejected_event",
    ErrorKind.REFUSED: "rejected_event",
}


def penalty_of(kind: ErrorKind) -> str:
    """The ``DEFAULT_WEIGHTS`` reason a rejection of ``kind`` is charged under."""
    return KIND_PENALTIES[kind]


@dataclass(frozen=True)
class ScoreConfig:
    ban_threshold: float = -100.0
    half_life_s: float = 300.0
    ban_s: float = 60.0
    max_ban_s: float = 3600.0
    max_peers: int = 10_000
    # A score closer to 0 than this (and no ban) is forgotten when the table needs room.
    neutral: float = 1.0
    # How long a peer's ban count is remembered after its last ban ended (repeat offenders).
    memory_s: float = 3600.0
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def __post_init__(self) -> None:
        if self.ban_threshold >= 0 or self.half_life_s <= 0 or self.ban_s <= 0:
            raise ValueError("ban_threshold < 0, half_life_s > 0 and ban_s > 0 are required")
        if self.max_ban_s < self.ban_s or self.max_peers < 1:
            raise ValueError("max_ban_s >= ban_s and max_peers >= 1 are required")


@dataclass
class _Entry:
    score: float
    at: float  # when ``score`` was last brought up to date
    banned_until: float = 0.0
    bans: int = 0
    last_ban_end: float = -math.inf


class PeerScores:
    """Scores of the peers we talk to; ``penalise`` returns True when that call banned it."""

    def __init__(self, config: ScoreConfig | None = None) -> None:
        self.config = config or ScoreConfig()
        self._peers: dict[str, _Entry] = {}
        self.bans_total = 0
        self.penalties_total = 0
        self.pruned_total = 0

    def __len__(self) -> int:
        return len(self._peers)

    def __contains__(self, peer: object) -> bool:
        return peer in self._peers

    def _decayed(self, entry: _Entry, now: float) -> float:
        elapsed = max(now - entry.at, 0.0)
        factor: float = 0.5 ** (elapsed / self.config.half_life_s)
        return entry.score * factor

    def score(self, peer: str, now: float) -> float:
        entry = self._peers.get(peer)
        return 0.0 if entry is None else self._decayed(entry, now)

    def is_banned(self, peer: str, now: float) -> bool:
        entry = self._peers.get(peer)
        return entry is not None and entry.banned_until > now

    def banned_until(self, peer: str) -> float:
        entry = self._peers.get(peer)
        return 0.0 if entry is None else entry.banned_until

    def banned(self, now: float) -> list[str]:
        return [p for p, e in self._peers.items() if e.banned_until > now]

    def penalise(self, peer: str, reason: str, now: float, count: float = 1.0) -> bool:
        """Subtract ``weight(reason) * count``; ban the peer if that crosses the threshold."""
        weight = self.config.weights.get(reason)
        if weight is None:
            raise ValueError(f"unknown penalty reason {reason!r}")
        entry = self._peers.get(peer)
        if entry is None:
            self._make_room(now)
            entry = self._peers[peer] = _Entry(0.0, now)
        entry.score = self._decayed(entry, now) - weight * max(count, 0.0)
        entry.at = now
        self.penalties_total += 1
        if entry.banned_until > now or entry.score > self.config.ban_threshold:
            return False
        if now - entry.last_ban_end > self.config.memory_s:
            entry.bans = 0
        entry.bans += 1
        length = min(self.config.ban_s * 2 ** (entry.bans - 1), self.config.max_ban_s)
        entry.banned_until = now + length
        entry.last_ban_end = entry.banned_until
        # A ban is the penalty: the peer comes back at a neutral score, not one that would
        # ban it again for the first small mistake.
        entry.score = 0.0
        self.bans_total += 1
        return True

    def _make_room(self, now: float) -> None:
        if len(self._peers) < self.config.max_peers:
            return
        self.prune(now)
        if len(self._peers) < self.config.max_peers:
            return
        # Still full of live entries: forget the least suspicious peer that is not banned.
        candidates = [(self._decayed(e, now), p) for p, e in self._peers.items()
                      if e.banned_until <= now]
        if candidates:
            del self._peers[max(candidates)[1]]
        else:  # every entry is a current ban: the one ending soonest goes
            del self._peers[min(self._peers, key=lambda p: self._peers[p].banned_until)]
        self.pruned_total += 1

    def prune(self, now: float) -> int:
        """Forget peers that are neither banned nor remembered as offenders, and decayed to ~0."""
        stale = [
            p for p, e in self._peers.items()
            if e.banned_until <= now
            and abs(self._decayed(e, now)) < self.config.neutral
            and now - e.last_ban_end > self.config.memory_s
        ]
        for peer in stale:
            del self._peers[peer]
        self.pruned_total += len(stale)
        return len(stale)


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; ``take`` spends them if there are enough."""

    __slots__ = ("_at", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate < 0 or burst <= 0:
            raise ValueError("rate >= 0 and burst > 0 are required")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._at = now

    def available(self, now: float) -> float:
        if now > self._at:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
        return self._tokens

    def take(self, now: float, amount: float = 1.0) -> bool:
        if self.available(now) < amount:
            return False
        self._tokens -= amount
        return True

    def full(self, now: float) -> bool:
        """Back at its burst (an idle bucket that can be dropped from a table)."""
        return self.available(now) >= self.burst


class PeerBuckets:
    """One :class:`TokenBucket` per peer, bounded: full (idle) buckets are dropped for room."""

    def __init__(self, rate: float, burst: float, max_peers: int = 10_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_peers = max_peers
        self._buckets: dict[str, TokenBucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, peer: str, now: float, amount: float = 1.0) -> bool:
        bucket = self._buckets.get(peer)
        if bucket is None:
            if len(self._buckets) >= self.max_peers:
                self._buckets = {p: b for p, b in self._buckets.items() if not b.full(now)}
                if len(self._buckets) >= self.max_peers:
                    # Everyone is spending: the newcomer shares the oldest entry's fate.
                    self._buckets.pop(next(iter(self._buckets)))
            bucket = self._buckets[peer] = TokenBucket(self.rate, self.burst, now)
        return bucket.take(now, amount)
