"""The outgoing buffer of an ``SdsChannel`` and its acknowledgements (spec, "outgoing buffer",
"Review ACK status"): our messages not yet acknowledged, their resend deadlines, and what a
received message's history and signed filter acknowledge (``sync.sds.acks``). A layer of the
channel: it returns the events to report; the channel sends the resends.
"""

from __future__ import annotations

from collections.abc import Callable

from sync.sds.acks import FilterEvidence, review_acks
from sync.sds.bloom import BloomParams
from sync.sds.buffers import OutgoingEntry
from sync.sds.config import SdsConfig
from sync.sds.events import Acknowledged, PossiblyAcknowledged, ResendExhausted, SdsEvent
from sync.sds.message import SignedEvent
from sync.sds.timers import TimerKind, TimerQueue

__all__ = ["OutgoingBuffer"]


class OutgoingBuffer:
    def __init__(self, config: SdsConfig, timers: TimerQueue) -> None:
        self.config = config
        self._timers = timers
        self.entries: dict[str, OutgoingEntry] = {}

    def add(self, mid: str, wire: bytes, now: float) -> None:
        self.entries[mid] = OutgoingEntry(mid, wire)
        self._timers.schedule(TimerKind.RESEND, mid, now + self.config.resend_interval)

    def discard(self, mid: str) -> None:
        if self.entries.pop(mid, None) is not None:
            self._timers.cancel(TimerKind.RESEND, mid)

    def review(self, event: SignedEvent, evidence: FilterEvidence | None, channel_id: str,
               needed: int, indexer: Callable[[str, BloomParams], tuple[int, ...]],
               events: list[SdsEvent]) -> None:
        """What ``event`` acknowledges of ours (appended to ``events``): acknowledged ones
        leave the buffer; newly possibly acknowledged ones are resent less often (spec:
        distinct periods)."""
        review = review_acks(self.entries, event, evidence, channel_id, self.config, needed,
                             indexer)
        timers, cfg = self._timers, self.config
        for mid, by_bloom in review.acknowledged:
            del self.entries[mid]
            timers.cancel(TimerKind.RESEND, mid)
            events.append(Acknowledged(mid, by_bloom))
        for entry in review.possibly:
            events.append(PossiblyAcknowledged(entry.message_id, len(entry.bloom_senders)))
            if not entry.possibly:
                entry.possibly = True
                due = timers.due(TimerKind.RESEND, entry.message_id)
                if due is not None:
                    later = due - cfg.resend_interval + cfg.possibly_acked_resend_interval
                    timers.schedule(TimerKind.RESEND, entry.message_id, later)

    def due(self, mid: str, now: float, events: list[SdsEvent]) -> bytes | None:
        """The wire to resend for a due RESEND timer (rescheduled), or None: acknowledged
        meanwhile, or given up after ``max_resends`` (``ResendExhausted``)."""
        entry = self.entries.get(mid)
        if entry is None:
            return None
        cfg = self.config
        if entry.attempts >= cfg.max_resends:
            del self.entries[mid]
            events.append(ResendExhausted(mid, entry.attempts))
            return None
        entry.attempts += 1
        period = cfg.possibly_acked_resend_interval if entry.possibly else cfg.resend_interval
        self._timers.schedule(TimerKind.RESEND, mid, now + period)
        return entry.wire
