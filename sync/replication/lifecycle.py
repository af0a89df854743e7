"""The Recon session lifecycle and the claims of a transfer, sans-IO: one object a driver asks
what to do and tells what happened.

Rules it owns (each used to be inline in the node's Recon service):

* **When the next session starts, and with whom**: ``PeerScheduler`` (rounds, pokes by new
  events, a minimum gap between rounds, latency and interest overlap in the choice), read by
  ``get_timer``/``handle_timer``; and **prompt sessions** outside the rounds, at once, with a
  peer that just connected or whose events show a gap (``connected``, ``gap``), at most once
  per ``prompt_min_s`` per peer.
* **Backoff**: a failed session backs its peer off exponentially; success resets it.
* **Who takes which range**: a session takes the first range of the backlog a truncated session
  left (linear catch-up); a session that fails or is declined **gives its range back** first in
  line, so it is always retried.
* **Which side fetches first**: the initiator fetches then serves, the responder serves then
  fetches (``SessionPlan.fetch_first``), so each side's want lists meet the other's answers.
* **Whether more follows at once**: a truncated session that fetched something, or one that
  used up a backlog range while more are queued, is followed by the next at once.
* **Claims**: keys being fetched are claimed (no concurrent session fetches them too); keys
  gossip is probably still delivering are left out; keys the log already holds are released
  (asked for through ``ReadStored``); keys a peer leaves out of its answer, or stops delivering,
  go back to the pool and cost it standing.
* **Penalties** of a failed session follow from its error's ``ErrorKind``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sync.actions import (
    Action,
    ClaimsLapsed,
    KeysWithheld,
    Penalize,
    ReadStored,
    Released,
    Role,
    SessionFailed,
    StartSession,
)
from sync.errors import RemoteProtocolError
from sync.peerscore import penalty_of
from sync.recon.peers import PeerScheduler, Range
from sync.transfer import ClaimTable, KeyRange, RangeBacklog, not_recent

__all__ = ["LifecycleConfig", "ReconLifecycle", "SessionPlan"]


@dataclass(frozen=True)
class LifecycleConfig:
    interval_s: float = 30.0
    #: Sessions started by new events come at most this often.
    min_round_s: float = 1.0
    max_sessions: int = 8
    claim_timeout_s: float = 30.0
    #: Claimed keys handed to the store stay claimed this long at most (their commit is slow).
    hold_s: float = 30.0
    max_claimed_keys: int = 400_000
    #: Keys of events younger than this (by their height) are left to gossip.
    gossip_grace_ms: int = 0
    #: Prompt sessions (a new connection, a gap) with one peer come at most this often.
    prompt_min_s: float = 5.0
    #: A gap prompts sessions with at most this many of the missing events' senders.
    gap_peers: int = 3

    @classmethod
    def of(cls, *, interval_s: float, gossip_grace_s: float, max_sessions: int,
           claim_timeout_s: float, max_missing_keys: int,
           prompt_min_s: float = 5.0) -> LifecycleConfig:
        """The node's settings (``[recon]``) as the lifecycle's: sessions started by new
        events come at most every second, and no sooner than the gossip grace (one sooner
        could not fetch anything gossip is still delivering: docs/bench/cluster.md); a commit
        holds its claims up to 30 s; claims are bounded at four sessions' worth of keys."""
        return cls(interval_s=interval_s, min_round_s=max(1.0, gossip_grace_s),
                   max_sessions=max_sessions, claim_timeout_s=claim_timeout_s, hold_s=30.0,
                   max_claimed_keys=4 * max_missing_keys,
                   gossip_grace_ms=int(gossip_grace_s * 1000), prompt_min_s=prompt_min_s)


@dataclass
class SessionPlan:
    """One session's part of the lifecycle, from ``begin`` to ``finished``/``failed``."""

    peer: str
    role: Role
    interests: Sequence[KeyRange]
    #: The backlog range this session owns (None: all our interests).
    scope: KeyRange | None
    started: float
    #: For a gap's prompt session: the moment (our clock) since which the peer's events
    #: travel by live gossip, the session's start.
    live_from: float | None = None
    #: With a peer connected anew, begun within the gossip grace of the connection and before
    #: any session with it finished (``ReconLifecycle.connected``): nothing is left to gossip.
    fresh: bool = False
    #: The claim session of its fetch phase (``want``), if it reached it.
    ticket: int | None = None
    fetched: int = 0
    #: The session's number (``ReplicationCore`` files its exchange under it).
    id: int = 0

    @property
    def prompt(self) -> bool:
        """It is with a peer connected anew (``fresh``: nothing is left to the gossip grace, a
        restarted peer's lost gossip never comes), or answers a gap (only events stamped after
        ``live_from`` are left to it: gossip did not bring what the gap lacks, but what the
        peer published since is gossip in flight)."""
        return self.fresh or self.live_from is not None

    @property
    def fetch_first(self) -> bool:
        """The initiator fetches then serves; the responder serves then fetches."""
        return self.role is Role.INITIATOR


@dataclass
class _Want:
    plan: SessionPlan
    keys: list[bytes] = field(default_factory=list)


class ReconLifecycle:
    def __init__(self, own_id: str, interests: Sequence[Range], rng: random.Random,
                 config: LifecycleConfig | None = None) -> None:
        self.config = cfg = config or LifecycleConfig()
        self.interests = interests
        self.schedule = PeerScheduler(own_id, interests, rng, interval_s=cfg.interval_s,
                                      min_round_s=cfg.min_round_s,
                                      max_sessions=cfg.max_sessions,
                                      prompt_min_s=cfg.prompt_min_s)
        self.backlog = RangeBacklog()
        self.claims = ClaimTable(cfg.claim_timeout_s, max_keys=cfg.max_claimed_keys,
                                 hold_s=cfg.hold_s)
        self._wants: dict[int, _Want] = {}
        self._ids = itertools.count(1)
        #: Peers our running prompt sessions are with (initiator side).
        self._prompting: set[str] = set()
        #: Peers connected anew (either side dialled) with whom no session has finished since,
        #: and when: their sessions begun within the gossip grace of it leave nothing to gossip
        #: (``connected``).
        self._fresh: dict[str, float] = {}

    # -- timers and peers ----------------------------------------------------------------------

    def poke(self) -> None:
        """Reconcile soon (a new event, a new peer, a gap, released claims)."""
        self.schedule.poke()

    def get_timer(self) -> float:
        return min(self.schedule.get_timer(), self.claims.get_timer())

    def handle_timer(self, now: float, connected: Collection[str],
                     latencies: Mapping[str, float]) -> list[Action]:
        """Lapsed claims (their peers pay ``withheld``), the prompt sessions due, then at most
        one round's session (weighted by ``latencies``: each peer's measured round trip, a
        peer missing from it counts as unmeasured)."""
        actions: list[Action] = []
        if now >= self.claims.get_timer():
            actions += self._lapse(now)
        if now >= self.schedule.get_timer():
            up = set(connected)
            prompts = [p for p in self.schedule.due_prompts(now) if p in up]
            actions += [StartSession(p) for p in prompts]
            peer = self.schedule.handle_timer(now, connected, latencies.get)
            if peer is not None and peer not in prompts:
                actions.append(StartSession(peer))
        return actions

    def _lapse(self, now: float) -> list[Action]:
        actions: list[Action] = []
        for each in self.claims.handle_timer(now):
            actions += [ClaimsLapsed(each.peer, each.count), Penalize(each.peer, "withheld")]
        if actions:
            actions.append(self._released())
        return actions

    def _released(self) -> Released:
        self.poke()
        return Released()

    def connected(self, peer: str, connected: Collection[str], now: float,
                  dialled: bool = True) -> bool | None:
        """A new connection: a prompt session with ``peer`` when we dialled it (a restarted
        peer and we may each lack what the other holds). False: deferred by the per-peer
        limit; None: an inbound connection, which only pokes the round.

        Either way, the sessions with ``peer`` begun within the gossip grace of this
        connection, until one finishes (in either role), leave nothing to the gossip grace:
        what it published before it went away, or while the link was down, was never gossiped
        to us and never will be (a restarted node does not resend it), so holding its newest
        events back would only delay them by a round. The restarted side dials, so this is its
        peers' side: their first session with it (its prompt session, whose fetch they make as
        the responder, or their own round's) takes in all it held (issue 37: each of a and c
        took b's last 1,000 events a round later). Its events' heights do not tell what it
        published before the connection: a burst's Lamport heights run ahead of the wall clock
        (``max(previous + 1, now)`` gains a millisecond per event above 1,000 a second), so the
        tail of a burst cut by the restart is stamped after the reconnection (left to gossip by
        that rule, 6 of b's 1,168 came 6 s later). What it publishes once the grace has passed
        is gossip like any other: a later session leaves it to gossip (seen once on CI: the
        restarted node's first new event, published 3 s after it reconnected, was fetched by
        a session its publish poked while the peer was still counted as connected anew)."""
        self._fresh.setdefault(peer, now)
        return self.schedule.connected(peer, connected, now, dialled)

    def gap(self, senders: Iterable[str | None], connected: Collection[str],
            now: float) -> tuple[int, int]:
        """Events arrived whose causal dependencies we lack, sent by ``senders``: prompt
        sessions with the first ``gap_peers`` of them that are connected (they certainly
        held those events) instead of waiting for a round, whose random peer may lack them
        too. Returns (prompted at once, deferred by the per-peer limit)."""
        up = set(connected)
        peers = list(dict.fromkeys(p for p in senders if p is not None and p in up))
        at_once = sum(self.schedule.prompt(p, now) for p in peers[:self.config.gap_peers])
        return at_once, min(len(peers), self.config.gap_peers) - at_once

    def disconnected(self, peer: str, now: float) -> None:
        self._fresh.pop(peer, None)
        self.schedule.disconnected(peer, now)

    # -- a session -----------------------------------------------------------------------------

    def begin(self, peer: str, role: Role, now: float) -> SessionPlan | None:
        """Start a session with ``peer`` (None: not now; a responder answers BUSY). It takes
        the first backlog range, if any."""
        ok = (self.schedule.begin_initiator(peer) if role is Role.INITIATOR
              else self.schedule.begin_responder(peer))
        if not ok:
            return None
        interests, scope = self.backlog.take(self.interests)
        # A responder's session answers our prompt too when both sides started one at once
        # and ours is the one the peer declines (the peer's goes on: ``begin_responder``).
        prompt = self.schedule.prompted(peer, now) or (
            role is Role.RESPONDER and peer in self._prompting)
        if prompt and role is Role.INITIATOR:
            self._prompting.add(peer)
        since = self._fresh.get(peer)
        fresh = since is not None and (now - since) * 1000 <= self.config.gossip_grace_ms
        if since is not None and not fresh:
            del self._fresh[peer]
        return SessionPlan(peer, role, interests, scope, now, fresh=fresh,
                           live_from=now if prompt and not fresh else None, id=next(self._ids))

    def reconciled(self, plan: SessionPlan, peer_interests: Sequence[Range] | None) -> None:
        self.schedule.learned(plan.peer, peer_interests)

    def declined(self, plan: SessionPlan) -> None:
        """The peer answered BUSY: the range goes back first in line; no backoff."""
        self.backlog.give_back(plan.scope)
        self._end(plan)

    def abandoned(self, plan: SessionPlan) -> None:
        """The session was cancelled on our side (shutdown): the range goes back, no backoff."""
        self.declined(plan)

    def failed(self, plan: SessionPlan | None, peer: str, role: Role, error: Exception | None,
               now: float) -> list[Action]:
        """The session ended early (``plan`` None: before it began its exchange): its range is
        given back, the peer backed off, and a protocol fault costs it by its kind."""
        if plan is not None:
            self.backlog.give_back(plan.scope)
        self.schedule.end(peer, initiator=role is Role.INITIATOR)
        if role is Role.INITIATOR:
            self._prompting.discard(peer)
        actions: list[Action] = []
        kind = None
        if isinstance(error, RemoteProtocolError):
            kind = error.kind
            actions.append(Penalize(peer, penalty_of(kind), float(error.count)))
        delay = self.schedule.failed(peer, now)
        if plan is not None:
            actions += self.close(plan)
        actions.append(SessionFailed(peer, role, kind, delay))
        return actions

    def finished(self, plan: SessionPlan, *, truncated: bool, lowest_dropped: bytes | None,
                 cuts: list[bytes]) -> bool:
        """The session went through. What a truncated one left is cut into the backlog;
        returns whether the next session with this peer should start at once (each such step
        either fetched something or used up a backlog range, so the chain ends)."""
        self._end(plan)
        self._fresh.pop(plan.peer, None)
        if plan.role is Role.INITIATOR:
            self.schedule.succeeded(plan.peer)
        self.backlog.finished(plan.scope, self.interests, truncated=truncated,
                              lowest_dropped=lowest_dropped, cuts=cuts)
        return (truncated and plan.fetched > 0) or (
            plan.scope is not None and len(self.backlog) > 0)

    def _end(self, plan: SessionPlan) -> None:
        self.schedule.end(plan.peer, initiator=plan.role is Role.INITIATOR)
        if plan.role is Role.INITIATOR:
            self._prompting.discard(plan.peer)
        self.close(plan)

    # -- its transfer ------------------------------------------------------------------------

    def want(self, plan: SessionPlan, missing: Iterable[bytes], now: float,
             wall_ms: int) -> list[Action]:
        """The fetch phase begins with ``missing`` (what reconciliation found, in causal order:
        ``sync.transfer.ReconExchange``): lapsed claims are settled first, keys gossip is still
        delivering left out, the rest claimed, their order kept (it is the fetch order, and
        SDS delivers what comes in causal order without buffering it). Returns a
        ``ReadStored`` request for the claimed keys (answer: ``stored``)."""
        actions = self._lapse(now)
        if self.config.gossip_grace_ms and not plan.fresh:
            found = list(missing)
            since_ms = (None if plan.live_from is None
                        else wall_ms - int((now - plan.live_from) * 1000))
            missing = not_recent(found, wall_ms, self.config.gossip_grace_ms, since_ms)
            if len(missing) < len(found):
                # Left to gossip: if gossip does not bring them (their sender restarted and
                # will not resend them), the round after the grace fetches them, not one a
                # whole interval later (the next round is min_round_s >= the grace away).
                self.poke()
        ticket = plan.ticket = self.claims.open(plan.peer, now)
        keys = self.claims.claim(ticket, missing, now)
        self._wants[ticket] = _Want(plan, keys)
        actions.append(ReadStored(ticket, tuple(keys)))
        return actions

    def stored(self, ticket: int, held: Collection[bytes]) -> list[bytes]:
        """The answer to ``ReadStored``: the claimed keys the log holds are released; the rest
        is what to fetch (in order). (Read after claiming: a commit landing during the read
        was still held when claimed, so not claimed; one before it is seen by it.)"""
        want = self._wants[ticket]
        if held:
            self.claims.release(ticket, [k for k in want.keys if k in held])
            want.keys = [k for k in want.keys if k not in held]
        return want.keys

    def progress(self, ticket: int, now: float) -> None:
        """The peer delivered, or we waited on our own store: not the peer withholding."""
        self.claims.progress(ticket, now)

    def delivered(self, ticket: int, keys: Iterable[bytes], now: float) -> None:
        self.claims.progress(ticket, now)
        for key in keys:
            self.claims.delivered(ticket, key, now)

    def answer_done(self, ticket: int, withheld: Sequence[bytes]) -> list[Action]:
        """A want list's answer is complete; ``withheld``: keys it left out, which return to
        the pool at once and cost the peer ``short_answer``."""
        if not withheld:
            return []
        peer = self._wants[ticket].plan.peer
        self.claims.release(ticket, withheld)
        return [KeysWithheld(peer, len(withheld)), Penalize(peer, "short_answer"),
                self._released()]

    def close(self, plan: SessionPlan) -> list[Action]:
        """The fetch phase is over: claims not delivered go back to the pool."""
        ticket, plan.ticket = plan.ticket, None
        if ticket is None:
            return []
        self._wants.pop(ticket, None)
        return [self._released()] if self.claims.close(ticket) else []

    @staticmethod
    def serve_budget(held_keys: int, batch: int) -> int:
        """How many events a peer may want from us in one session: no more than we hold, plus
        one batch of slack for events committed while it asks (beyond it the session ends:
        ``sync.transfer.WantServer``)."""
        return held_keys + batch

    # -- the store -----------------------------------------------------------------------------

    def queued(self, keys: Iterable[bytes]) -> None:
        """Fetched events entered the store's queue: claimed until their commit."""
        self.claims.queued(keys)

    def committed(self, keys: Iterable[bytes], new: Collection[bytes]) -> tuple[list[bytes], int]:
        """Records the store was given committed (``new``: the keys actually inserted). Every
        hold ends; returns (the new keys, how many of them were fetched). A new event pokes the
        scheduler (CIP-124: announce by reconciling with a random peer soon)."""
        stored: list[bytes] = []
        fetched = 0
        for key in keys:
            held = self.claims.committed(key)
            if key in new:
                stored.append(key)
                fetched += held
        if stored:
            self.poke()
        return stored, fetched
