"""After a truncated Recon session: the key ranges still to reconcile, one session each.

A session keeps at most ``recon.max_missing_keys`` of the keys it finds missing and drops the
rest for later. Reconciling the whole key space again for the next part makes a catch-up of N
events list about N^2 / (2 * max_missing_keys) keys over its sessions (1,000,000 events with
the default 100,000: ~5.5M listed, against 1M; every session walks what is still missing). So
the truncated session's dropped keys (``ReconExchange.lowest_dropped`` and ``cuts``, one in
every ``max_missing_keys``) cut what is left into ranges of about a session's worth, and the
next sessions, with any peer and in either role, reconcile one range each (their interests
narrowed to it). A range whose session fails goes back to the front; one whose session
truncates again is cut again. Nothing here decides what is fetched: narrowing only limits a
session's scope, and the regular rounds, once the backlog is empty, reconcile everything again
and catch whatever a range session missed (keys that arrived meanwhile, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from sync.recon.interests import intersect, normalize

__all__ = ["KeyRange", "RangeBacklog"]

KeyRange = tuple[bytes, bytes]


class RangeBacklog:
    def __init__(self, max_ranges: int = 1000) -> None:
        if max_ranges < 1:
            raise ValueError("max_ranges must be >= 1")
        self.max_ranges = max_ranges
        self._ranges: list[KeyRange] = []
        #: Ranges handed to sessions, and those that came back truncated (cut again).
        self.taken_total = 0
        self.recut_total = 0

    def __len__(self) -> int:
        return len(self._ranges)

    def take(self, interests: Sequence[KeyRange]) -> tuple[Sequence[KeyRange], KeyRange | None]:
        """The interests of the next session: ``interests`` narrowed to the first range of
        the backlog (which the session now owns), or ``interests`` when it is empty."""
        while self._ranges:
            scope = self._ranges.pop(0)
            narrowed = intersect(normalize(interests), (scope,))
            if narrowed:
                self.taken_total += 1
                return narrowed, scope
        return interests, None

    def give_back(self, scope: KeyRange | None) -> None:
        """The session for ``scope`` failed or was declined: the range is next again."""
        if scope is not None:
            self._ranges.insert(0, scope)
            del self._ranges[self.max_ranges:]

    def finished(self, scope: KeyRange | None, interests: Sequence[KeyRange], *, truncated: bool,
                 lowest_dropped: bytes | None, cuts: list[bytes]) -> None:
        """A session over ``scope`` (None: all of ``interests``) ended; when it had to drop
        missing keys, what is left of its scope is cut at ``cuts`` and goes first."""
        if not truncated or lowest_dropped is None or not interests:
            return
        hi = scope[1] if scope is not None else max(r[1] for r in interests)
        if not lowest_dropped < hi:
            return
        points = sorted({c for c in cuts if lowest_dropped < c < hi})
        ranges = list(pairwise([lowest_dropped, *points, hi]))
        self.recut_total += 1
        self._ranges[:0] = ranges
        # Beyond the bound the last ranges are forgotten: the regular rounds cover them.
        del self._ranges[self.max_ranges:]
