"""Fetch-by-id (``/syncnode/fetch/1.0.0``): request format, answer checks, whom to ask.

Request: one frame, message ids as lowercase ASCII hex separated by newlines (at most
``max_ids``). Response: one frame per event found (its canonical signed wire), then one empty
frame. Unknown ids are simply absent from the answer; an answer with more events than ids asked
for, or an event over the size limit, breaks the protocol.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Sequence

from sync.errors import ErrorKind, LocalProtocolError, RemoteProtocolError
from sync.sds.events import MissingEntry

__all__ = ["FetchQueue", "FetchReader", "encode_request", "parse_request", "plan_peers"]

_HEX = frozenset(b"0123456789abcdef")
_ID_CHARS = 64


def encode_request(ids: Sequence[str]) -> bytes:
    return "\n".join(ids).encode("ascii")


def parse_request(data: bytes, max_ids: int, peer: str | None = None) -> list[str]:
    """Decode a request frame, checking its size before anything else is decoded."""
    if len(data) > max_ids * (_ID_CHARS + 1):
        raise RemoteProtocolError(f"fetch request of {len(data)} bytes, max {max_ids} ids", peer,
                                  ErrorKind.OVER_LIMIT)
    parts = [p for p in data.split(b"\n") if p]
    if len(parts) > max_ids:
        raise RemoteProtocolError(f"fetch request asks for {len(parts)} ids, max {max_ids}", peer,
                                  ErrorKind.OVER_LIMIT)
    if any(len(p) != _ID_CHARS or not set(p) <= _HEX for p in parts):
        raise RemoteProtocolError("fetch request holds a malformed message id", peer)
    return list(dict.fromkeys(p.decode("ascii") for p in parts))


class FetchReader:
    """Checks the frames answering one request of ``ids``."""

    def __init__(self, ids: Sequence[str], max_event_bytes: int = 1 << 20,
                 peer: str | None = None) -> None:
        if not ids:
            raise LocalProtocolError("a fetch request needs at least one id")
        self.asked = len(ids)
        self.max_event_bytes = max_event_bytes
        self.peer = peer
        self.received = 0
        self.done = False

    def receive(self, frame: bytes) -> bytes | None:
        """An event's wire, or None at the end of the answer."""
        if self.done:
            raise LocalProtocolError("answer already complete")
        if not frame:
            self.done = True
            return None
        self.received += 1
        if self.received > self.asked:
            raise RemoteProtocolError("fetch answer holds more events than ids asked", self.peer,
                                      ErrorKind.UNREQUESTED)
        if len(frame) > self.max_event_bytes:
            raise RemoteProtocolError("fetched event over the size limit", self.peer,
                                      ErrorKind.TOO_LARGE)
        return frame


def plan_peers(senders: Sequence[str], others: Sequence[str], extra: int,
               skip: frozenset[str] = frozenset(), rng: random.Random | None = None
               ) -> list[str]:
    """Whom to ask, in order: the original senders (they certainly had the events), then
    ``extra`` of ``others`` (in a random order drawn from ``rng``, so that the load of
    answering spreads over the peers; in the given order without one); never a peer in
    ``skip``."""
    first = [p for p in dict.fromkeys(senders) if p not in skip]
    rest = [p for p in dict.fromkeys(others) if p not in skip and p not in first]
    if rng is not None:
        rng.shuffle(rest)
    return first + rest[:extra]


class FetchQueue:
    """Which missing events to fetch, and when: the fetch timer, sans-IO.

    Most gaps close by themselves within moments (the event is in flight, or Recon is
    delivering a whole range), so an id is fetched only ``grace_s`` after SDS reported it, and
    only if it is still missing then (the caller checks). Ids are fetched in batches of at most
    ``max_ids``: when the oldest is due, the ids queued after it go along (one request instead
    of several). An id queued or being fetched is not queued again until ``done``.
    """

    def __init__(self, grace_s: float, max_ids: int) -> None:
        if grace_s < 0 or max_ids < 1:
            raise ValueError("grace_s >= 0 and max_ids >= 1 are required")
        self.grace_s = grace_s
        self.max_ids = max_ids
        self._queue: deque[tuple[float, MissingEntry]] = deque()
        self._in_flight: set[str] = set()

    def __len__(self) -> int:
        return len(self._in_flight)

    def want(self, entries: Iterable[MissingEntry], now: float) -> None:
        due = now + self.grace_s
        for entry in entries:
            if entry.message_id not in self._in_flight:
                self._in_flight.add(entry.message_id)
                self._queue.append((due, entry))

    def get_timer(self) -> float | None:
        """When the next batch is due; None while nothing is queued."""
        return self._queue[0][0] if self._queue else None

    def handle_timer(self, now: float) -> list[MissingEntry]:
        """The batch to fetch now (empty if none is due); hand it back to ``done`` after."""
        if not self._queue or self._queue[0][0] > now:
            return []
        batch: list[MissingEntry] = []
        while self._queue and len(batch) < self.max_ids:
            batch.append(self._queue.popleft()[1])
        return batch

    def done(self, batch: Iterable[MissingEntry]) -> None:
        """The batch was fetched (or given up on): its ids may be queued again."""
        for entry in batch:
            self._in_flight.discard(entry.message_id)
