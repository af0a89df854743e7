"""Which message ids a channel has delivered: the newest in memory, the rest asked of the store.

A channel's log grows without bound, but SDS only needs recent ids in memory (causal histories,
the bloom filter and repairs name recent messages). ``DeliveredIndex`` keeps the ids of the
newest ``window`` deliveries, in delivery order, and the *floor*: every delivered id with a
Lamport timestamp above it is in memory. A question memory cannot answer (an id below the
floor, or a history entry not in memory once something was evicted) goes to ``lookup``, the
store's answer (the node asks its database and its queue of uncommitted writes). Without a
lookup nothing is evicted: the whole log stays in memory, as the pure protocol tests expect.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

__all__ = ["DeliveredIndex", "DeliveredLookup"]

#: Given message ids, return those the store holds in this channel's log.
DeliveredLookup = Callable[[Sequence[str]], Collection[str]]


class DeliveredIndex:
    def __init__(self, window: int, lookup: DeliveredLookup | None = None) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        # Ordered by delivery, oldest first. An OrderedDict, not a dict: evicting the oldest of
        # a dict (``next(iter(d))`` then ``pop``) scans the deleted slots at the front of its
        # entry table, which grow until the next resize, so it cost O(window) per delivery once
        # the window was full (64% of a catch-up's busy samples at 200,000 events).
        self._recent: OrderedDict[str, int] = OrderedDict()
        self._window = window
        self._lookup = lookup
        #: Every delivered id with a Lamport timestamp above this is in memory; -1: all are.
        self.floor = -1
        #: Questions the store answered (for tests and metrics).
        self.lookups = 0

    @property
    def bounded(self) -> bool:
        return self._lookup is not None

    @property
    def complete(self) -> bool:
        """True while memory holds the whole log (nothing evicted or left on disk)."""
        return self.floor < 0

    def __len__(self) -> int:
        """Ids in memory (the whole log only while ``complete``)."""
        return len(self._recent)

    def __bool__(self) -> bool:
        return bool(self._recent) or not self.complete

    @property
    def memory(self) -> Mapping[str, int]:
        """The ids in memory (id -> Lamport time), for membership tests in bulk."""
        return self._recent

    def in_memory(self, mid: str) -> bool:
        return mid in self._recent

    def lamport(self, mid: str) -> int | None:
        return self._recent.get(mid)

    def items(self) -> Iterable[tuple[str, int]]:
        return self._recent.items()

    def add(self, mid: str, lamport: int) -> None:
        recent = self._recent
        recent[mid] = lamport
        if self._lookup is not None and len(recent) > self._window:
            # The oldest delivery leaves memory; the store holds it (or its write is queued).
            self.floor = max(self.floor, recent.popitem(last=False)[1])

    def load(self, entries: Sequence[tuple[int, str]], *, truncated: bool) -> None:
        """Fill from the persisted log: ``entries`` (lamport, id) in log order, the newest part
        of the log when ``truncated`` (the rest is on disk, below the oldest loaded)."""
        keep = entries[-self._window :] if self._lookup is not None else entries
        for lamport, mid in keep:
            self._recent[mid] = lamport
        if self._lookup is not None and (truncated or len(keep) < len(entries)) and keep:
            # Ids sharing the oldest loaded timestamp may be on disk only.
            self.floor = max(self.floor, keep[0][0])

    def discard(self, mid: str) -> bool:
        return self._recent.pop(mid, None) is not None

    def contains(self, mid: str, lamport: int | None = None) -> bool:
        """Is ``mid`` delivered? ``lamport``, when known, lets memory answer above the floor."""
        if mid in self._recent:
            return True
        if self.complete or (lamport is not None and lamport > self.floor):
            return False
        return bool(self.known([mid]))

    def known(self, ids: Iterable[str]) -> set[str]:
        """Those of ``ids`` that are delivered (one store question for all not in memory)."""
        recent = self._recent
        wanted = list(dict.fromkeys(ids))
        found = {mid for mid in wanted if mid in recent}
        if self.complete or self._lookup is None:
            return found
        ask = [mid for mid in wanted if mid not in recent]
        if ask:
            self.lookups += 1
            asked = set(ask)
            found.update(mid for mid in self._lookup(ask) if mid in asked)
        return found
