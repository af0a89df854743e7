"""The WANT/EVENTS transfer after a Recon reconciliation, both sides, as state machines.

The *fetcher* sends want lists (``WANT``, the last one ``WANT_LAST``) of at most ``batch`` keys,
keeping ``ahead`` lists outstanding so that the peer prepares the next answer while we ingest
one; with ``first``, the lists start at that size and double up to ``batch`` (the first answer
is read, sent and verified in a fraction of a batch's time, so ingesting starts early: in a
small catch-up a whole first batch was most of the session). Each answer is one or more
``EVENTS`` frames ending with ``EVENTS_LAST``. Every event must
be one we asked for; an answer that leaves out keys the peer advertised is a *short answer*:
those keys are reported (to return to the pool and to cost the peer standing).

The *server* answers want lists: at most ``budget`` keys over the whole session (no more than
it holds, plus one batch), each list within the frame limits. It reads the events in
byte-bounded batches (:func:`byte_batches`) and packs them into frames (:class:`EventsPacker`)
as it goes, so that one stream never holds more than about ``serve_batch_bytes`` of events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from sync.errors import ErrorKind, LocalProtocolError, RemoteProtocolError
from sync.transfer.frames import (
    EVENTS,
    EVENTS_LAST,
    WANT,
    WANT_LAST,
    pack_items,
    unpack_items,
)

__all__ = [
    "EventsFrame",
    "EventsPacker",
    "WantFetcher",
    "WantList",
    "WantServer",
    "byte_batches",
]

_T = TypeVar("_T")
_ITEM_OVERHEAD = 8  # a varint length prefix, generously


@dataclass(frozen=True, slots=True)
class EventsFrame:
    wires: list[bytes]
    final: bool  # ends the answer to one want list


@dataclass(frozen=True, slots=True)
class WantList:
    keys: list[bytes]
    last: bool


class WantFetcher:
    """The side that wants events: plans want lists and checks the answers."""

    def __init__(self, keys: Sequence[bytes], *, batch: int, ahead: int = 2,
                 max_event_bytes: int = 1 << 20, peer: str | None = None,
                 first: int | None = None) -> None:
        if batch < 1 or ahead < 1 or (first is not None and first < 1):
            raise LocalProtocolError("batch >= 1, ahead >= 1 and first >= 1 are required")
        self.batch = batch
        self.ahead = ahead
        self.max_event_bytes = max_event_bytes
        self.peer = peer
        self._chunks = _chunked(keys, batch, first or batch)
        self._sent = 0
        self._answered = 0  # answers whose EVENTS_LAST arrived
        self._settled = 0  # answers whose events were all accepted (answer_done)
        self._frames = 0  # frames of the answer being received
        self._wanted: set[bytes] = set()
        self._open: deque[list[bytes]] = deque()
        self.withheld_total = 0

    @property
    def done(self) -> bool:
        return self._settled == len(self._chunks)

    @property
    def answers_pending(self) -> int:
        return self._sent - self._answered

    def next_frames(self) -> list[bytes]:
        """WANT frames to send now, keeping ``ahead`` answers outstanding."""
        out = []
        while self._sent < len(self._chunks) and self._sent - self._answered < self.ahead:
            chunk = self._chunks[self._sent]
            self._sent += 1
            last = self._sent == len(self._chunks)
            self._wanted.update(chunk)
            self._open.append(chunk)
            out.append(pack_items(WANT_LAST if last else WANT, chunk))
        return out

    def receive(self, frame: bytes) -> EventsFrame:
        """One frame of an answer; ``RemoteProtocolError`` if it breaks the protocol."""
        if self._answered >= self._sent:
            raise RemoteProtocolError("events nobody asked for", self.peer, ErrorKind.UNREQUESTED)
        if not frame or frame[0] not in (EVENTS, EVENTS_LAST):
            raise RemoteProtocolError("expected events", self.peer)
        wires = _unpack(frame, self.batch, self.max_event_bytes, self.peer)
        final = frame[0] == EVENTS_LAST
        if not final and not wires:  # an empty non-final frame could be repeated forever
            raise RemoteProtocolError("empty events frame", self.peer)
        self._frames += 1
        if self._frames > self.batch:  # one answer cannot hold more frames than keys
            raise RemoteProtocolError("too many events frames", self.peer, ErrorKind.OVER_LIMIT)
        if final:
            self._answered += 1
            self._frames = 0
        return EventsFrame(wires, final)

    def accept(self, key: bytes) -> None:
        """An event arrived (its key computed from the verified event): was it asked for?"""
        if key not in self._wanted:
            raise RemoteProtocolError("event we did not ask for", self.peer,
                                      ErrorKind.UNREQUESTED)
        self._wanted.discard(key)

    def answer_done(self) -> list[bytes]:
        """The events of the oldest answer are all accepted: the keys it left out."""
        if not self._open:
            raise LocalProtocolError("no answer outstanding")
        chunk = self._open.popleft()
        self._settled += 1
        withheld = [k for k in chunk if k in self._wanted]
        self._wanted.difference_update(withheld)
        self.withheld_total += len(withheld)
        return withheld

    def outstanding(self) -> list[bytes]:
        """Keys asked for and not delivered yet (to release when the session fails)."""
        return list(self._wanted)


def _chunked(keys: Sequence[bytes], batch: int, first: int) -> list[list[bytes]]:
    """``keys`` in lists of ``first``, twice that, ... up to ``batch`` each (one empty list
    when there are none: the peer still gets a ``WANT_LAST``)."""
    out: list[list[bytes]] = []
    size, at = min(first, batch), 0
    while at < len(keys):
        out.append(list(keys[at : at + size]))
        at += size
        size = min(size * 2, batch)
    return out or [[]]


class WantServer:
    """The side that answers want lists: checks them against the session's budget."""

    def __init__(self, *, budget: int, max_items: int, max_key_bytes: int = 256,
                 peer: str | None = None) -> None:
        self.budget = budget
        self.max_items = max_items
        self.max_key_bytes = max_key_bytes
        self.peer = peer
        self.done = False

    def receive(self, frame: bytes) -> WantList:
        if self.done:
            raise RemoteProtocolError("want list after the last one", self.peer)
        if not frame or frame[0] not in (WANT, WANT_LAST):
            raise RemoteProtocolError("expected a want list", self.peer)
        keys = _unpack(frame, self.max_items, self.max_key_bytes, self.peer)
        last = frame[0] == WANT_LAST
        if not last and not keys:  # an empty non-final frame could repeat forever
            raise RemoteProtocolError("empty want frame", self.peer)
        self.budget -= len(keys)
        if self.budget < 0:
            raise RemoteProtocolError("peer wants more events than we hold", self.peer,
                                      ErrorKind.OVER_LIMIT)
        self.done = last
        return WantList(keys, last)


def _unpack(frame: bytes, max_items: int, max_item_bytes: int, peer: str | None) -> list[bytes]:
    try:
        return unpack_items(frame[1:], max_items=max_items, max_item_bytes=max_item_bytes)
    except RemoteProtocolError as exc:
        raise exc.from_peer(peer) from None


def byte_batches(sizes: Sequence[tuple[_T, int]], max_bytes: int,
                 max_items: int) -> list[list[_T]]:
    """Group ``(item, size)`` into batches of at most ``max_bytes`` (one oversize item alone)
    and ``max_items``: read from the database one batch at a time."""
    out: list[list[_T]] = []
    batch: list[_T] = []
    total = 0
    for item, size in sizes:
        if batch and (total + size > max_bytes or len(batch) >= max_items):
            out.append(batch)
            batch, total = [], 0
        batch.append(item)
        total += size
    if batch:
        out.append(batch)
    return out


class EventsPacker:
    """Packs event wires into ``EVENTS`` frames of at most ``max_frame_bytes``/``max_items``."""

    def __init__(self, max_frame_bytes: int, max_items: int) -> None:
        self.limit = max_frame_bytes - 16
        self.max_items = max_items
        self._batch: list[bytes] = []
        self._size = 0

    def add(self, wire: bytes) -> bytes | None:
        """Queue one wire; returns a full frame to send first, if the wire did not fit."""
        out = None
        if self._batch and (self._size + len(wire) + _ITEM_OVERHEAD > self.limit
                            or len(self._batch) >= self.max_items):
            out = pack_items(EVENTS, self._batch)
            self._batch, self._size = [], 0
        self._batch.append(wire)
        self._size += len(wire) + _ITEM_OVERHEAD
        return out

    def finish(self) -> bytes:
        """The ``EVENTS_LAST`` frame ending the answer (possibly empty)."""
        out = pack_items(EVENTS_LAST, self._batch)
        self._batch, self._size = [], 0
        return out
