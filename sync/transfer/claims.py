"""Which keys are being fetched, by whom, and until when.

A key the reconciliation found missing is *claimed* by the session that will fetch it, so that
a concurrent session (with another peer, or the same peer the other way round) does not fetch
it as well. A claim is not forever: it lapses when its session makes no progress for
``timeout`` seconds, or at once when the peer's answer leaves the key out, so that a peer that
advertises keys and withholds their events only delays them.
The next lapse is the table's timer: ``get_timer()``; the driver calls ``handle_timer(now)``
then and gets one :class:`Lapsed` per session whose claims went back to the pool.

A delivered key is *held*, in two stages:

* **waiting** (``delivered``): handed to SDS, which may buffer it for its causal dependencies
  and may evict it from that buffer without telling anyone; this hold lapses after ``hold_s``
  so an evicted event is fetched again.
* **queued** (``queued``): handed to the store. Held until the store reports it ``committed``
  (stored, a duplicate, or failed), however long the store's queue is: a slow database
  (PostgreSQL behind a fast fetch) must not make a second session fetch what is already
  waiting for its commit. Only ``committed`` ends this hold: the store reports every record
  it was given, stored or not.

Bounded: claimed plus held keys are at most ``max_keys``; a claim beyond that is refused (the
key is simply fetched by a later session), which also bounds how far the fetch runs ahead of
a slow store. A key delivered beyond the bound (only a lapsed session's late delivery can
be) takes the place of the oldest waiting hold, or is not held at all when every held key
is queued: a queued hold is never evicted (``evicted_total`` counts both).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["ClaimTable", "Lapsed"]


@dataclass(frozen=True)
class Lapsed:
    """A session's undelivered claims lapsed: ``count`` keys back to the pool; its peer
    stopped delivering (the driver charges it and reconciles again soon)."""

    peer: str
    count: int


@dataclass
class _Session:
    peer: str
    deadline: float
    keys: set[bytes] = field(default_factory=set)


class ClaimTable:
    def __init__(self, timeout: float, max_keys: int = 1_000_000, hold_s: float = 30.0) -> None:
        if timeout <= 0 or max_keys < 1 or hold_s < 0:
            raise ValueError("timeout > 0, max_keys >= 1 and hold_s >= 0 are required")
        self.timeout = timeout
        self.max_keys = max_keys
        self.hold_s = hold_s
        self._owner: dict[bytes, int] = {}
        self._sessions: dict[int, _Session] = {}
        # Delivered keys: waiting in SDS (until a deadline), or queued in the store (no deadline).
        self._waiting: dict[bytes, float] = {}
        self._queued: set[bytes] = set()
        self._next_id = 0
        self.lapsed_total = 0
        self.released_total = 0
        self.refused_total = 0
        self.evicted_total = 0

    def __len__(self) -> int:
        return len(self._owner)

    @property
    def held(self) -> int:
        return len(self._waiting) + len(self._queued)

    @property
    def queued_keys(self) -> int:
        """Delivered keys waiting for the store's commit."""
        return len(self._queued)

    def open(self, peer: str, now: float) -> int:
        self._next_id += 1
        self._sessions[self._next_id] = _Session(peer, now + self.timeout)
        return self._next_id

    def is_claimed(self, key: bytes, now: float) -> bool:
        """Claimed by a live session, or delivered and held; lapsed claims do not count."""
        if key in self._queued:
            return True
        until = self._waiting.get(key)
        if until is not None:
            if until > now:
                return True
            del self._waiting[key]
        sid = self._owner.get(key)
        if sid is None:
            return False
        session = self._sessions.get(sid)
        return session is not None and session.deadline > now

    def claim(self, sid: int, keys: Iterable[bytes], now: float) -> list[bytes]:
        """Claim for session ``sid`` the keys nobody else has a live claim on; returns those."""
        session = self._sessions[sid]
        self.expire(now)
        session.deadline = now + self.timeout
        out = []
        for key in keys:
            if self.is_claimed(key, now):
                continue
            if len(self._owner) + self.held >= self.max_keys:
                self.refused_total += 1
                continue
            self._drop_owner(key)
            self._owner[key] = sid
            session.keys.add(key)
            out.append(key)
        return out

    def progress(self, sid: int, now: float) -> None:
        """The session received something useful: its claims live another ``timeout``."""
        session = self._sessions.get(sid)
        if session is not None:
            session.deadline = now + self.timeout

    def delivered(self, sid: int, key: bytes, now: float) -> None:
        """The event of ``key`` arrived (and went to validation): hold it until committed, or
        for ``hold_s`` while it is not in the store's queue yet."""
        session = self._sessions.get(sid)
        if session is not None:
            session.keys.discard(key)
        if self._owner.get(key) == sid:
            del self._owner[key]
        if key in self._queued:
            return
        self._waiting.pop(key, None)
        if len(self._owner) + self.held >= self.max_keys and not self._make_room(now):
            self.evicted_total += 1
            return
        self._waiting[key] = now + self.hold_s

    def queued(self, keys: Iterable[bytes]) -> None:
        """These keys' events are in the store's queue: held until ``committed``.
        Keys no session delivered (gossip, publishing) are ignored."""
        waiting = self._waiting
        for key in keys:
            if waiting.pop(key, None) is not None:
                self._queued.add(key)

    def committed(self, key: bytes) -> bool:
        """The store is done with the event of ``key`` (stored, a duplicate, or not stored:
        then it may be fetched again); True if a session had fetched it (and it was held)."""
        was_held = self._waiting.pop(key, None) is not None
        if key in self._queued:
            self._queued.discard(key)
            was_held = True
        self._drop_owner(key)
        return was_held

    def release(self, sid: int, keys: Sequence[bytes]) -> int:
        """Give ``keys`` back to the pool (the peer left them out of its answer)."""
        session = self._sessions.get(sid)
        released = 0
        for key in keys:
            if self._owner.get(key) == sid:
                del self._owner[key]
                released += 1
            if session is not None:
                session.keys.discard(key)
        self.released_total += released
        return released

    def close(self, sid: int) -> int:
        """End session ``sid``; what it did not deliver returns to the pool."""
        session = self._sessions.pop(sid, None)
        if session is None:
            return 0
        released = 0
        for key in session.keys:
            if self._owner.get(key) == sid:
                del self._owner[key]
                released += 1
        self.released_total += released
        return released

    def get_timer(self) -> float:
        """When the next claims lapse: the earliest deadline of a session holding undelivered
        claims (``math.inf``: none). Holds need no timer: they lapse when next looked at."""
        return min((s.deadline for s in self._sessions.values() if s.keys), default=math.inf)

    def handle_timer(self, now: float) -> list[Lapsed]:
        """The claims lapsed by ``now``, released (``expire``), one :class:`Lapsed` a session."""
        return [Lapsed(peer, count) for peer, count in self.expire(now)]

    def expire(self, now: float) -> list[tuple[str, int]]:
        """Release the claims of sessions past their deadline: ``(peer, keys released)`` each.

        Only undelivered claims lapse; delivered keys keep their hold. The session stays open
        (its late deliveries are still welcome) with a fresh deadline.
        """
        out = []
        for sid, session in self._sessions.items():
            if session.deadline > now or not session.keys:
                continue
            lapsed = [k for k in session.keys if self._owner.get(k) == sid]
            for key in lapsed:
                del self._owner[key]
            session.keys.clear()
            session.deadline = now + self.timeout
            self.lapsed_total += len(lapsed)
            out.append((session.peer, len(lapsed)))
        return out

    def _make_room(self, now: float) -> bool:
        """One slot for a delivered key beyond the bound: lapsed waiting holds, else the
        oldest waiting one. Queued holds are never evicted (False: no room)."""
        waiting = self._waiting
        if not waiting:
            return False
        expired = [k for k, t in waiting.items() if t <= now]
        for key in expired:
            del waiting[key]
        if not expired:
            del waiting[next(iter(waiting))]
            self.evicted_total += 1
        return True

    def _drop_owner(self, key: bytes) -> None:
        sid = self._owner.pop(key, None)
        if sid is not None and (session := self._sessions.get(sid)) is not None:
            session.keys.discard(key)
