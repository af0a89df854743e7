"""The incoming side of an ``SdsChannel``: delivery into the log and the dependency buffer
around it (spec, "incoming buffer"). A message whose dependencies are all delivered is logged,
then every waiting message it completes (a cascade, no sweep); one that names undelivered ids
waits for them (``sync.sds.dependencies``: bounded per channel and per sender), and the ids
nobody delivered are noted missing (a lost timer, an SDS-R request) until they come or are
declared lost. It also holds the channel's Lamport clock, which every delivery advances.

A layer of the channel: it reports what happens as events (appended to the channel's list)
and keeps its deadlines in the channel's shared timer queue.
"""

from __future__ import annotations

from sync.sds.config import SdsConfig
from sync.sds.delivered import DeliveredIndex
from sync.sds.dependencies import DependencyBuffer
from sync.sds.events import (
    Delivered,
    DependencyLost,
    Evicted,
    MissingDependencies,
    MissingEntry,
    SdsEvent,
)
from sync.sds.history import CausalHistory
from sync.sds.message import HistoryRef, SignedEvent
from sync.sds.repair_buffers import RepairBuffers
from sync.sds.timers import TimerKind, TimerQueue

__all__ = ["Incoming"]


class Incoming:
    def __init__(self, config: SdsConfig, log: DeliveredIndex, history: CausalHistory,
                 repair: RepairBuffers, timers: TimerQueue, events: list[SdsEvent],
                 lamport: int) -> None:
        self.config = config
        #: The channel's Lamport clock (epoch milliseconds): the highest delivered or sent.
        self.lamport = lamport
        self._log = log
        self._history = history
        self._repair = repair
        self._timers = timers
        self._events = events
        self.buffer = DependencyBuffer(config)
        # Direct references to the buffer's structures: the receive path reads them for every
        # message.
        self.waiting = self.buffer.waiting
        self.waiters = self.buffer.waiters
        self.missing = self.buffer.missing
        self.lost = self.buffer.lost

    # ------------------------------------------------------------------ reading
    def is_missing(self, message_id: str) -> bool:
        """True while ``message_id`` is a known-missing dependency (no copy of the set)."""
        return message_id in self.missing

    def holds(self, message_id: str) -> bool:
        """Received: delivered (as far as memory knows) or waiting for its dependencies."""
        return message_id in self.waiting or self._log.in_memory(message_id)

    def is_unknown(self, mid: str) -> bool:
        """Not delivered as far as memory knows, not waiting, not lost."""
        return (not self._log.in_memory(mid) and mid not in self.waiting
                and mid not in self.lost)

    @property
    def waiting_ids(self) -> frozenset[str]:
        return frozenset(self.waiting)

    @property
    def missing_ids(self) -> frozenset[str]:
        return frozenset(self.missing)

    # ------------------------------------------------------------------ delivery
    def deliver(self, event: SignedEvent, *, lost_dependency: bool,
                history_ids: tuple[str, ...] | None = None) -> None:
        """Log ``event``, then every waiting message this completes (cascade, no sweep).
        ``history_ids``: ``event.history_ids`` if the caller has them already."""
        if not self.waiters:
            self._log_event(event, lost_dependency, history_ids)
            return
        stack = [(event, lost_dependency)]
        while stack:
            ev, lost = stack.pop()
            self._log_event(ev, lost)
            for waiter in self.waiters.pop(ev.message_id, ()):
                waiting = self.waiting.get(waiter)
                if waiting is None:
                    continue
                waiting.missing.discard(ev.message_id)
                if not waiting.missing:
                    self.buffer.release(waiter)
                    stack.append((waiting.event, waiting.lost_dependency))

    def _log_event(self, ev: SignedEvent, lost: bool,
                   history_ids: tuple[str, ...] | None = None) -> None:
        mid = ev.message_id
        lamport = ev.lamport
        assert lamport is not None
        self._log.add(mid, lamport, ev.sender_id)
        if lamport > self.lamport:
            self.lamport = lamport
        # Not a head: a lost one (messages naming it were delivered already), nor one we knew
        # was missing (a message we received named it: others learn of it from there).
        # (Only a missing id is in the missing quota: no call for the common case.)
        head = True
        if mid in self.missing and self.buffer.unmiss(mid) is not None:
            self._timers.cancel(TimerKind.LOST, mid)
            head = False
        lost_ids = self.lost
        if mid in lost_ids:
            lost_ids.discard(mid)
            head = False
        if history_ids is None:
            history_ids = ev.history_ids
        self._history.logged(mid, lamport, ev.sender_id, history_ids, head=head)
        self._repair.remember(mid, ev.sender_id, ev.wire)
        self._events.append(
            Delivered(mid, ev.sender_id, lamport, ev.content, history_ids, ev.wire, lost)
        )

    def deliver_ready(self) -> None:
        """Deliver every waiting message with nothing left missing (after a restore)."""
        for ready in [w for w in self.waiting.values() if not w.missing]:
            self.buffer.release(ready.event.message_id)
            self.deliver(ready.event, lost_dependency=ready.lost_dependency)

    # ------------------------------------------------------------------ waiting
    def wait(self, event: SignedEvent, missing: set[str], lost: bool) -> bool:
        """Hold ``event`` until ``missing`` is delivered, within the waiting buffer's bounds."""
        evicted = self.buffer.hold(event, missing, lost)
        if evicted is None:
            self._events.append(Evicted("waiting", event.message_id, event.sender_id))
            return False
        for old in evicted:
            # Its copy may come again (a resend, a repair, Recon) and is then accepted afresh.
            self._events.append(Evicted("waiting", old.event.message_id, old.event.sender_id))
        return True

    def received(self, mid: str) -> None:
        """``mid`` arrived (and waits): it is not missing any more."""
        if self.buffer.unmiss(mid) is not None:
            self._timers.cancel(TimerKind.LOST, mid)

    def learn_hint(self, h: HistoryRef) -> None:
        assert h.retrieval_hint is not None
        if self._history.knows_hint(h.message_id):
            return
        if self._log.in_memory(h.message_id):
            self._history.set_hint(h.message_id, h.retrieval_hint)
        elif h.message_id in self.missing:
            self.missing[h.message_id] = h

    # ------------------------------------------------------------------ missing and lost
    def note_missing(self, refs: list[HistoryRef], now: float, *, charged_to: str) -> None:
        new = []
        for ref in refs:
            mid = ref.message_id
            if mid in self.missing:
                continue
            for old in self.buffer.add_missing(ref, charged_to):
                self._evict_missing(old)
            self._timers.schedule(TimerKind.LOST, mid, now + self.config.lost_timeout)
            self._repair.want(ref, now)
            new.append(MissingEntry(mid, ref.retrieval_hint, ref.sender_id))
        if new:
            self._events.append(MissingDependencies(tuple(new)))

    def restore_missing(self, ref: HistoryRef, lost_at: float) -> None:
        """A missing id from saved state, its lost timer due at ``lost_at``."""
        for old in self.buffer.add_missing(ref, ref.sender_id or ""):
            self._evict_missing(old)
        self._timers.schedule(TimerKind.LOST, ref.message_id, lost_at)

    def _evict_missing(self, mid: str) -> None:
        if self.buffer.unmiss(mid) is None:
            return
        self._timers.cancel(TimerKind.LOST, mid)
        self._repair.seen(mid)  # no more repair requests for it
        self._events.append(Evicted("missing", mid))

    def declare_lost(self, mid: str) -> None:
        ref = self.buffer.unmiss(mid)
        if ref is None:
            return
        self._repair.seen(mid)
        pending = [mid]
        while pending:
            lost_id = pending.pop()
            self.lost.add(lost_id)
            dependants = tuple(self.waiters.pop(lost_id, ()))
            self._events.append(DependencyLost(lost_id, dependants))
            for waiter in dependants:
                waiting = self.waiting.get(waiter)
                if waiting is None:
                    continue
                waiting.missing.discard(lost_id)
                waiting.lost_dependency = True
                if self.config.lost_policy == "drop":
                    self.buffer.release(waiter)
                    pending.append(waiter)
                elif not waiting.missing:
                    self.buffer.release(waiter)
                    self.deliver(waiting.event, lost_dependency=True)
