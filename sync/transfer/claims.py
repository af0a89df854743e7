"""Which keys are being fetched, by whom, and until when.

A key the reconciliation found missing is *claimed* by the session that will fetch it, so that
a concurrent session (with another peer, or the same peer the other way round) does not fetch
it as well. A claim is not forever: it lapses when its session makes no progress for
``timeout`` seconds, or at once when the peer's answer leaves the key out, so that a peer that
advertises keys and withholds their events only delays them. Delivered keys are *held* for a
grace period while they wait for their causal dependencies and the database commit.

Bounded: at most ``max_keys`` keys claimed and ``max_keys`` held at once; a claim beyond that is
refused (the key is simply fetched by a later session).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["ClaimTable"]


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
        self._held: dict[bytes, float] = {}
        self._next_id = 0
        self.lapsed_total = 0
        self.released_total = 0
        self.refused_total = 0

    def __len__(self) -> int:
        return len(self._owner)

    @property
    def held(self) -> int:
        return len(self._held)

    def open(self, peer: str, now: float) -> int:
        self._next_id += 1
        self._sessions[self._next_id] = _Session(peer, now + self.timeout)
        return self._next_id

    def is_claimed(self, key: bytes, now: float) -> bool:
        """Claimed by a live session, or delivered and held; lapsed claims do not count."""
        until = self._held.get(key)
        if until is not None:
            if until > now:
                return True
            del self._held[key]
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
            if len(self._owner) >= self.max_keys:
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
        """The event of ``key`` arrived (and went to validation): hold it until committed."""
        session = self._sessions.get(sid)
        if session is not None:
            session.keys.discard(key)
        if self._owner.get(key) == sid:
            del self._owner[key]
        if len(self._held) >= self.max_keys:
            self._held = {k: t for k, t in self._held.items() if t > now}
            if len(self._held) >= self.max_keys:
                del self._held[next(iter(self._held))]
        self._held[key] = now + self.hold_s

    def committed(self, key: bytes) -> bool:
        """The event of ``key`` is stored; True if a session had fetched it (and it was held)."""
        was_held = self._held.pop(key, None) is not None
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

    def expire(self, now: float) -> list[tuple[str, int]]:
        """Release the claims of sessions past their deadline: ``(peer, keys released)`` each.

        The session stays open (its late deliveries are still welcome) with a fresh deadline.
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

    def _drop_owner(self, key: bytes) -> None:
        sid = self._owner.pop(key, None)
        if sid is not None and (session := self._sessions.get(sid)) is not None:
            session.keys.discard(key)
