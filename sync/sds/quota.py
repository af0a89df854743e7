"""Bounds on a buffer a peer can fill: entries and bytes, per sender and in all.

The SDS waiting buffer (messages whose dependencies are missing) and the missing set (ids that
some message named) grow with what peers send; without a bound, one peer can make a node hold
any amount (docs/security.md "SDS buffers"). A :class:`SenderQuota` tracks the keys of such a
buffer with the sender each is charged to and its size, and says which keys to evict so that
a new one fits:

* a sender over its own share loses its own oldest entries first, so that a flooding sender
  pays before anybody else does;
* when the buffer as a whole is full the oldest entry of all goes (fresh sender keys in an open
  group can still push out honest entries, but only down to what Recon fetches again later).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["QuotaLimits", "SenderQuota"]


@dataclass(frozen=True)
class QuotaLimits:
    max_entries: int
    max_bytes: int
    max_entries_per_sender: int
    max_bytes_per_sender: int


class SenderQuota:
    def __init__(self, limits: QuotaLimits) -> None:
        self.limits = limits
        self._all: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._by_sender: dict[str, OrderedDict[str, int]] = {}
        self._sender_bytes: dict[str, int] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, key: object) -> bool:
        return key in self._all

    def fits(self, size: int) -> bool:
        """Whether an entry of ``size`` can be held at all (it may still evict others)."""
        lim = self.limits
        return size <= min(lim.max_bytes, lim.max_bytes_per_sender) and min(
            lim.max_entries, lim.max_entries_per_sender) > 0

    def add(self, key: str, sender: str, size: int) -> list[str]:
        """Charge ``key`` to ``sender``; returns the keys evicted to make room (their owner
        must drop them). The caller checked :meth:`fits` first."""
        lim = self.limits
        evicted: list[str] = []
        mine = self._by_sender.get(sender)
        while mine and (len(mine) + 1 > lim.max_entries_per_sender
                        or self._sender_bytes[sender] + size > lim.max_bytes_per_sender):
            oldest = next(iter(mine))
            self.remove(oldest)
            evicted.append(oldest)
            mine = self._by_sender.get(sender)
        while self._all and (len(self._all) + 1 > lim.max_entries
                             or self.bytes + size > lim.max_bytes):
            oldest = next(iter(self._all))
            self.remove(oldest)
            evicted.append(oldest)
        self._all[key] = (sender, size)
        self._by_sender.setdefault(sender, OrderedDict())[key] = size
        self._sender_bytes[sender] = self._sender_bytes.get(sender, 0) + size
        self.bytes += size
        return evicted

    def remove(self, key: str) -> None:
        entry = self._all.pop(key, None)
        if entry is None:
            return
        sender, size = entry
        self.bytes -= size
        mine = self._by_sender[sender]
        del mine[key]
        if mine:
            self._sender_bytes[sender] -= size
        else:
            del self._by_sender[sender]
            del self._sender_bytes[sender]

    def senders(self) -> int:
        return len(self._by_sender)
