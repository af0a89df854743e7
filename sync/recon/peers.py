"""Whom to reconcile with, and when: the Recon round timer, CIP-124 weighted peer choice,
per-peer back-off and one session per pair of peers, sans-IO.

``now`` is the caller's monotonic clock in seconds; randomness comes from the ``random.Random``
passed in, so a test with a seeded generator and a fixed clock sees every decision.

Rounds: a round starts a session with one chosen peer. After a round the next one comes when
poked (a commit, a new connection, a released claim), but no sooner than ``min_round_s`` later,
and otherwise after ``interval_s`` times a random factor in [0.5, 1) (so that peers do not fall
into step). A session costs both sides a stream and several round trips: pokes come with every
commit, so at most one session per ``min_round_s`` is started by them.

One session per pair: two concurrent sessions would reconcile and fetch the same difference
twice. A session from a peer we already serve is declined; when both sides started one at the
same moment, the session of the smaller peer id goes on (each side decides the same way without
talking). A peer that fails a session is backed off for 2^failures seconds (at most
``max_backoff_s``); a success resets it.

Prompt sessions: a peer that just connected (a restart, a healed link), or whose events show we
lack their causal dependencies, is reconciled with at once (``prompt``), outside the rounds: a
round would wait ``min_round_s`` and then choose a random peer, often one that lacks the same
events. A prompt waits only for a session already running with that peer and for its back-off,
and comes at most once per ``prompt_min_s`` per peer, so a peer cannot make us loop (a peer whose
events keep showing gaps gets one session per ``prompt_min_s``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from sync.recon.eventid import channel_bounds, sender_bounds

__all__ = ["DEFAULT_LATENCY_S", "MAX_PEER_STATES", "PeerScheduler", "PeerSyncState",
           "node_interests"]

# Peers whose sync state (interests, back-off) is remembered while they are not connected.
MAX_PEER_STATES = 1024
DEFAULT_LATENCY_S = 0.05
_LATENCY_FLOOR_S = 0.01

Range = tuple[bytes, bytes]


def node_interests(network_id: int, channels: Iterable[str],
                   members: Collection[str] | None = None) -> list[Range]:
    """The key ranges a node reconciles: its channels, or in a closed group (``members``,
    our own id included) only the members' streams, so Recon never even offers the rest."""
    if members:
        return sorted(sender_bounds(network_id, c, m) for c in channels for m in members)
    return sorted(channel_bounds(network_id, c) for c in channels)


@dataclass
class PeerSyncState:
    interests: tuple[Range, ...] | None = None
    failures: int = 0
    backoff_until: float = 0.0
    sessions: int = 0


class PeerScheduler:
    def __init__(
        self,
        own_peer_id: str,
        interests: Sequence[Range],
        rng: random.Random,
        *,
        interval_s: float,
        min_round_s: float,
        max_sessions: int = 16,
        max_backoff_s: float = 300.0,
        max_states: int = MAX_PEER_STATES,
        prompt_min_s: float = 5.0,
    ) -> None:
        if interval_s <= 0 or min_round_s < 0 or max_sessions < 1 or max_states < 1:
            raise ValueError("interval_s > 0, min_round_s >= 0, max_sessions and max_states "
                             ">= 1 are required")
        self.own_peer_id = own_peer_id
        self.interests = list(interests)
        self.rng = rng
        self.interval_s = interval_s
        self.min_round_s = min_round_s
        self.max_sessions = max_sessions
        self.max_backoff_s = max_backoff_s
        self.max_states = max_states
        self.peers: dict[str, PeerSyncState] = {}
        self.initiating: set[str] = set()
        self.serving: set[str] = set()
        self._last_round: float | None = None
        self._idle_until = 0.0
        self._poked = True  # the first round comes at once
        self.prompt_min_s = prompt_min_s
        #: Peers to reconcile with at once (connected ones only) -> earliest start.
        self._prompts: dict[str, float] = {}
        #: When each connected peer's last prompt session started (the per-peer limit).
        self._prompted: dict[str, float] = {}
        #: Prompt sessions returned by ``due_prompts`` and not begun yet.
        self._starting: set[str] = set()

    # -- the round timer -----------------------------------------------------------------------

    def poke(self) -> None:
        """Reconcile soon (after a commit, a new connection, released claims)."""
        self._poked = True

    def get_timer(self) -> float:
        """When the next round or prompt session is due (``handle_timer`` then chooses the
        round's peer; ``due_prompts`` lists the prompted ones)."""
        return min(self._round_at(), self._next_prompt())

    def _round_at(self) -> float:
        if self._last_round is None:
            return 0.0
        earliest = self._last_round + self.min_round_s
        return earliest if self._poked else max(earliest, self._idle_until)

    def handle_timer(self, now: float, connected: Collection[str],
                     latency: Callable[[str], float | None]) -> str | None:
        """Start a round if one is due: the peer to start a session with, or None (prompt
        sessions are ``due_prompts``')."""
        if now < self._round_at():
            return None
        self._last_round = now
        self._poked = False
        self._idle_until = now + self.min_round_s + self.interval_s * self.rng.uniform(0.5, 1.0)
        return self.choose(now, connected, latency)

    # -- prompt sessions -----------------------------------------------------------------------

    def prompt(self, peer: str, now: float) -> bool:
        """Reconcile with ``peer`` (connected) at once. Returns False when the per-peer limit
        defers it (its last prompt session started less than ``prompt_min_s`` ago)."""
        if peer == self.own_peer_id:
            return True
        last = self._prompted.get(peer)
        at = now if last is None else max(now, last + self.prompt_min_s)
        self._prompts[peer] = min(self._prompts.get(peer, at), at)
        return at <= now

    def _start_at(self, peer: str, due: float) -> float:
        state = self.peers.get(peer)
        return max(due, state.backoff_until) if state is not None else due

    def _next_prompt(self) -> float:
        """When the next prompt session may start (a peer in a session waits for its end:
        the driver looks again when a session ends)."""
        return min((self._start_at(p, due) for p, due in self._prompts.items()
                    if not self.in_session(p)), default=float("inf"))

    def due_prompts(self, now: float) -> list[str]:
        """The peers whose prompt session starts now (each counts against its limit)."""
        due = [p for p, at in self._prompts.items()
               if not self.in_session(p) and self._start_at(p, at) <= now]
        if due and len(self._prompted) >= self.max_states:  # bounded: forget spent limits
            self._prompted = {p: t for p, t in self._prompted.items()
                              if t + self.prompt_min_s > now}
        for peer in due:
            del self._prompts[peer]
            self._prompted[peer] = now
            self._starting.add(peer)
        return due

    def prompted(self, peer: str, now: float) -> bool:
        """A session with ``peer`` begins (either side): whether it answers a prompt (one
        ``due_prompts`` returned, or one still pending, which this session consumes)."""
        if peer in self._starting:
            self._starting.discard(peer)
            return True
        if peer in self._prompts:
            del self._prompts[peer]
            self._prompted[peer] = now
            return True
        return False

    def choose(self, now: float, connected: Collection[str],
               latency: Callable[[str], float | None]) -> str | None:
        """CIP-124 random peer sync order: weighted by interest overlap, inversely by latency.
        A peer we are in a session with, or that is backed off, is not chosen; neither is one
        whose interests share nothing with ours."""
        candidates: list[str] = []
        weights: list[float] = []
        for peer in connected:
            state = self.state(peer, connected, now)
            if self.in_session(peer) or state.backoff_until > now:
                continue
            overlap = self._overlap(state.interests)
            if overlap == 0:
                continue
            candidates.append(peer)
            weights.append(overlap / ((latency(peer) or DEFAULT_LATENCY_S) + _LATENCY_FLOOR_S))
        if not candidates:
            return None
        return self.rng.choices(candidates, weights=weights)[0]

    def _overlap(self, theirs: tuple[Range, ...] | None) -> float:
        if theirs is None:  # not synced yet: assume everything is shared
            return 1.0
        shared = sum(1 for lo, hi in self.interests
                     if any(lo < t_hi and t_lo < hi for t_lo, t_hi in theirs))
        return shared / max(len(self.interests), 1)

    # -- peer state ----------------------------------------------------------------------------

    def state(self, peer: str, connected: Collection[str] = (), now: float = 0.0
              ) -> PeerSyncState:
        """The peer's sync state; the table is bounded (connected and backed-off peers are
        kept first, then the oldest entries go)."""
        state = self.peers.get(peer)
        if state is None:
            if len(self.peers) >= self.max_states:
                self.peers = {p: s for p, s in self.peers.items()
                              if p in connected or s.backoff_until > now}
                while len(self.peers) >= self.max_states:
                    del self.peers[next(iter(self.peers))]
            state = self.peers[peer] = PeerSyncState()
        return state

    def connected(self, peer: str, connected: Collection[str], now: float,
                  dialled: bool = True) -> bool | None:
        """A fresh connection is the moment a late joiner (or a restarted peer, or one behind a
        healed link) and we need to catch up with each other: a prompt session with it when we
        dialled it (the restarted side dials its peers, and one session serves both ways).
        A connection a stranger opened only pokes the round: each one costing us a session at
        once would let identities that connect and never answer hold sessions (and their
        connections, protected from pruning) for nothing. Returns ``prompt``'s answer, None
        when no prompt was asked."""
        self.state(peer, connected, now)
        self.poke()
        return self.prompt(peer, now) if dialled else None

    def disconnected(self, peer: str, now: float) -> None:
        self._prompts.pop(peer, None)  # (its limit stays: reconnecting does not reset it)
        self._starting.discard(peer)
        state = self.peers.get(peer)
        if state is not None and state.backoff_until <= now:
            del self.peers[peer]  # nothing worth remembering

    # -- sessions ------------------------------------------------------------------------------

    def in_session(self, peer: str) -> bool:
        return peer in self.initiating or peer in self.serving

    def begin_initiator(self, peer: str) -> bool:
        """Claim the pair for a session we start; False if one with ``peer`` is running."""
        if self.in_session(peer):
            return False
        self.initiating.add(peer)
        return True

    def begin_responder(self, peer: str) -> bool:
        """Take a session ``peer`` started, or False to decline it (answer BUSY): a second
        session from the same peer, a simultaneous start the peer loses, or too many."""
        if peer in self.serving:
            return False
        if peer in self.initiating and self.own_peer_id < peer:
            return False
        if len(self.serving) + len(self.initiating) >= self.max_sessions:
            return False
        self.serving.add(peer)
        return True

    def end(self, peer: str, *, initiator: bool) -> None:
        (self.initiating if initiator else self.serving).discard(peer)

    def succeeded(self, peer: str) -> None:
        state = self.state(peer)
        state.failures = 0
        state.sessions += 1

    def learned(self, peer: str, interests: Sequence[Range] | None) -> None:
        """The peer's interests, known once the reconciliation is through."""
        self.state(peer).interests = tuple(interests or ())

    def failed(self, peer: str, now: float) -> float:
        """Back the peer off; returns the delay in seconds."""
        state = self.state(peer)
        state.failures += 1
        delay = min(self.max_backoff_s, 2.0 ** min(state.failures, 62))
        state.backoff_until = now + delay
        return delay
