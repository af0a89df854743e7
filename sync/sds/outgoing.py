"""The outgoing buffer of an ``SdsChannel`` and its acknowledgements (spec, "outgoing buffer",
"Review ACK status"): our messages not yet acknowledged, their resend deadlines, and what a
received message's history and signed filter acknowledge (``sync.sds.acks``). A layer of the
channel: it returns the events to report; the channel sends the resends.

Memory (issue 31): an entry holds a reference to the message's canonical wire (the same bytes
object the ``Delivered`` event, the repair cache and the node's store write were given, never
a copy); the buffer holds at most ``max_outgoing_bytes`` of wires (beyond, the oldest entry
leaves it, reported as ``Evicted("outgoing")``: it is in the log, and Recon carries it to
peers; only SDS resends stop), and resends are paced to ``resend_bytes_per_s`` of
transmissions, wire and suffix (a due resend beyond it waits for the next second), so that a
backlog does not turn into one burst of transmissions held at once by the transport: a
5,000-event burst nobody acknowledged falls due in one tick, and its resends were ~9 MB of
datagrams queued at once when the pace counted only the wires.
"""

from __future__ import annotations

from collections.abc import Callable

from sync.sds.acks import FilterEvidence, review_acks
from sync.sds.bloom import BloomParams
from sync.sds.buffers import OutgoingEntry
from sync.sds.config import SdsConfig
from sync.sds.events import (
    Acknowledged,
    Evicted,
    PossiblyAcknowledged,
    ResendExhausted,
    SdsEvent,
)
from sync.sds.message import SignedEvent
from sync.sds.timers import TimerKind, TimerQueue

__all__ = ["OutgoingBuffer"]


class OutgoingBuffer:
    def __init__(self, config: SdsConfig, timers: TimerQueue) -> None:
        self.config = config
        self._timers = timers
        self.entries: dict[str, OutgoingEntry] = {}
        #: Bytes of the entries' wires (at most ``max_outgoing_bytes``).
        self.nbytes = 0
        # Resend pacing: the second being spent and the bytes resent in it.
        self._pace_start = float("-inf")
        self._pace_bytes = 0
        #: Resends moved to a later second by the pacing (a counter, for tests and metrics).
        self.deferred = 0
        # Acknowledgement delay, smoothed, and its mean deviation (TCP's SRTT and RTTVAR).
        self._ack_delay: float | None = None
        self._ack_dev = 0.0

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(self.entries)

    def timeout(self) -> float:
        """How long a message waits for its acknowledgement before its first resend: the
        configured interval, or longer while acknowledgements take longer (issue 31: at a
        rate the cluster could not keep up with, acknowledgements came after the interval
        and nearly every event was resent 3-4 times, which took the rest of the cores; the
        resends now back off as TCP's retransmission timeout does), at most 3 intervals."""
        cfg = self.config
        if self._ack_delay is None:
            return cfg.resend_interval
        rto = self._ack_delay + 4 * self._ack_dev
        return min(max(cfg.resend_interval, rto), 3 * cfg.resend_interval)

    def _sample(self, entry: OutgoingEntry, now: float) -> None:
        """One acknowledgement delay, from a message never resent (Karn's rule: a resent
        one's acknowledgement could answer any of its transmissions)."""
        if entry.attempts or entry.sent_at is None:
            return
        delay = max(0.0, now - entry.sent_at)
        if self._ack_delay is None:
            self._ack_delay, self._ack_dev = delay, delay / 2
        else:
            self._ack_dev += (abs(delay - self._ack_delay) - self._ack_dev) / 4
            self._ack_delay += (delay - self._ack_delay) / 8

    def add(self, mid: str, wire: bytes, now: float, events: list[SdsEvent] | None = None,
            *, history: tuple[str, ...] = ()) -> None:
        self.entries[mid] = OutgoingEntry(mid, wire, history=history, sent_at=now, last_sent=now)
        self.nbytes += len(wire)
        self._timers.schedule(TimerKind.RESEND, mid, now + self.timeout())
        limit = self.config.max_outgoing_bytes
        while self.nbytes > limit and len(self.entries) > 1:
            oldest = next(iter(self.entries))
            self.discard(oldest)
            if events is not None:
                events.append(Evicted("outgoing", oldest))

    def restore(self, entry: OutgoingEntry, resend_at: float) -> bool:
        """An entry from saved state, if within the byte bound (the oldest come first)."""
        if self.entries and self.nbytes + len(entry.wire) > self.config.max_outgoing_bytes:
            return False
        self.entries[entry.message_id] = entry
        self.nbytes += len(entry.wire)
        self._timers.schedule(TimerKind.RESEND, entry.message_id, resend_at)
        return True

    def _drop(self, mid: str) -> OutgoingEntry | None:
        entry = self.entries.pop(mid, None)
        if entry is not None:
            self.nbytes -= len(entry.wire)
        return entry

    def discard(self, mid: str) -> None:
        if self._drop(mid) is not None:
            self._timers.cancel(TimerKind.RESEND, mid)

    def review(self, event: SignedEvent, evidence: FilterEvidence | None, channel_id: str,
               needed: int, indexer: Callable[[str, BloomParams], tuple[int, ...]],
               events: list[SdsEvent], now: float) -> None:
        """What ``event`` acknowledges of ours (appended to ``events``): acknowledged ones
        leave the buffer; newly possibly acknowledged ones are resent less often (spec:
        distinct periods)."""
        review = review_acks(self.entries, event, evidence, channel_id, self.config, needed,
                             indexer)
        if not review.acknowledged and not review.possibly:
            return
        timers, cfg = self._timers, self.config
        past: list[str] = []
        for mid, by_bloom in review.acknowledged:
            entry = self._drop(mid)
            timers.cancel(TimerKind.RESEND, mid)
            events.append(Acknowledged(mid, by_bloom))
            if entry is not None and not by_bloom:
                self._sample(entry, now)
                past.extend(entry.history)
        if past:
            self._acknowledge_past(past, events, now)
        for entry in review.possibly:
            events.append(PossiblyAcknowledged(entry.message_id, len(entry.bloom_senders)))
            if not entry.possibly:
                entry.possibly = True
                if timers.due(TimerKind.RESEND, entry.message_id) is not None:
                    # From its last transmission, not from the due time minus the current
                    # timeout: that one may have grown since it was scheduled (the resend
                    # came early, the very case the back-off is for).
                    base = entry.last_sent if entry.last_sent is not None else now
                    timers.schedule(TimerKind.RESEND, entry.message_id,
                                    max(now, base + cfg.possibly_acked_resend_interval))

    def _acknowledge_past(self, stack: list[str], events: list[SdsEvent], now: float) -> None:
        """A causal history names only what its sender delivered, and a message is delivered
        after its causal past: so ours that a named one depends on (its history, theirs, ...)
        were delivered there too, and are acknowledged with it (issue 31). Without this, of a
        batch of 200 messages chained by their histories only the newest is named (the DAG
        head), the other 199 wait for bloom filters, which at 1,000 events/s cover about a
        second of receipts, and many were resent that had arrived everywhere.

        The exception is a message delivered with a *lost* dependency: the namer may not hold
        that past. A member declares an id lost ``lost_timeout`` after it first missed it, and
        nobody can miss it before we first sent it; so while ``now`` is within
        ``lost_timeout`` of an entry's first send, no member can have declared it lost, and
        the walk acknowledges it; an older entry (or one restored from saved state, whose
        first send is unknown) waits for an acknowledgement of its own, and the walk does not
        go past it (its own past is older still). This holds whatever the resend settings
        and restarts; it assumes the channel's members share ``lost_timeout`` (a member with
        a shorter one could give up on an id sooner). A member lying in its history could
        stop these resends as it can by naming each id; Recon still carries them."""
        horizon = now - self.config.lost_timeout
        while stack:
            mid = stack.pop()
            entry = self.entries.get(mid)
            if entry is None or entry.sent_at is None or entry.sent_at <= horizon:
                continue
            self._drop(mid)
            self._timers.cancel(TimerKind.RESEND, mid)
            events.append(Acknowledged(mid, False))
            stack.extend(entry.history)

    def due(self, mid: str, now: float, events: list[SdsEvent]) -> bytes | None:
        """The wire to resend for a due RESEND timer (rescheduled), or None: acknowledged
        meanwhile, or given up after ``max_resends`` (``ResendExhausted``)."""
        entry = self.entries.get(mid)
        if entry is None:
            return None
        cfg = self.config
        if entry.attempts >= cfg.max_resends:
            self._drop(mid)
            events.append(ResendExhausted(mid, entry.attempts))
            return None
        if now >= self._pace_start + 1.0:
            self._pace_start, self._pace_bytes = now, 0
        size = len(entry.wire)
        if self._pace_bytes and self._pace_bytes + size > cfg.resend_bytes_per_s:
            self.deferred += 1
            self._timers.schedule(TimerKind.RESEND, mid, self._pace_start + 1.0)
            return None
        self._pace_bytes += size
        entry.attempts += 1
        entry.last_sent = now
        period = (cfg.possibly_acked_resend_interval if entry.possibly
                  else max(cfg.resend_interval, self.timeout()))
        self._timers.schedule(TimerKind.RESEND, mid, now + period)
        return entry.wire

    def spent(self, nbytes: int) -> None:
        """What a resend carried beyond its wire (our filter, signature and the rest of the
        suffix: ~1.2 KB, most of a small event's transmission), counted in the pace."""
        self._pace_bytes += nbytes
