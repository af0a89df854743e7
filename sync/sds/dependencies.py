"""The dependency buffer of an ``SdsChannel`` (spec, "incoming buffer"): messages waiting for
missing dependencies, who waits for which id, the missing set and the ids declared lost, all
within their per-channel and per-sender bounds (docs/security.md "SDS buffers"). A layer of the
channel: plain structures and the operations that keep them consistent; the channel turns what
they report (evictions) into events and timers.
"""

from __future__ import annotations

from sync.sds.buffers import WaitingEntry
from sync.sds.config import SdsConfig
from sync.sds.message import HistoryRef, SignedEvent
from sync.sds.quota import QuotaLimits, SenderQuota

__all__ = ["DependencyBuffer"]

#: A missing-set entry is charged as one unit; the byte bounds follow from the counts.
_MISSING_ENTRY_BYTES = 1


class DependencyBuffer:
    def __init__(self, cfg: SdsConfig) -> None:
        self.waiting: dict[str, WaitingEntry] = {}
        #: dependency id -> ids of the waiting messages that need it.
        self.waiters: dict[str, list[str]] = {}
        self.missing: dict[str, HistoryRef] = {}
        self.lost: set[str] = set()
        self.waiting_quota = SenderQuota(QuotaLimits(
            cfg.max_waiting, cfg.max_waiting_bytes, cfg.max_waiting_per_sender,
            cfg.max_waiting_bytes_per_sender))
        self.missing_quota = SenderQuota(QuotaLimits(
            cfg.max_missing, cfg.max_missing * _MISSING_ENTRY_BYTES, cfg.max_missing_per_sender,
            cfg.max_missing_per_sender * _MISSING_ENTRY_BYTES))

    def hold(self, event: SignedEvent, missing: set[str], lost: bool
             ) -> list[WaitingEntry] | None:
        """Hold ``event`` until ``missing`` is delivered: the entries evicted to make room, or
        None when it does not fit at all."""
        mid, sender = event.message_id, event.sender_id
        size = len(event.wire) + len(event.content)
        quota = self.waiting_quota
        if not quota.fits(size):
            return None
        evicted = [e for e in map(self.drop, quota.add(mid, sender, size)) if e is not None]
        self.waiting[mid] = WaitingEntry(event, missing, lost)
        for dep in missing:
            self.waiters.setdefault(dep, []).append(mid)
        return evicted

    def release(self, mid: str) -> WaitingEntry | None:
        """A waiting message leaves the buffer (to be delivered, or dropped)."""
        self.waiting_quota.remove(mid)
        return self.waiting.pop(mid, None)

    def drop(self, mid: str) -> WaitingEntry | None:
        """Evict a waiting message, and its place in the waiters of what it waited for."""
        entry = self.release(mid)
        if entry is None:
            return None
        for dep in entry.missing:
            waiters = self.waiters.get(dep)
            if waiters is not None and mid in waiters:
                waiters.remove(mid)
                if not waiters:
                    del self.waiters[dep]
        return entry

    def add_missing(self, ref: HistoryRef, charged_to: str) -> list[str]:
        """Note ``ref`` missing, charged to the sender of the message naming it; returns the
        missing ids evicted to make room (the caller unmisses them)."""
        evicted = self.missing_quota.add(ref.message_id, charged_to, _MISSING_ENTRY_BYTES)
        self.missing[ref.message_id] = ref
        return list(evicted)

    def unmiss(self, mid: str) -> HistoryRef | None:
        self.missing_quota.remove(mid)
        return self.missing.pop(mid, None)
