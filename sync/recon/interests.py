"""Interest ranges: sorted, disjoint, half-open ``[lo, hi)`` byte-string intervals."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from sync.errors import LocalProtocolError

__all__ = ["Interests", "clip", "intersect", "normalize", "within"]

Interests = tuple[tuple[bytes, bytes], ...]


def normalize(ranges: Iterable[tuple[bytes, bytes]]) -> Interests:
    """Sort and merge overlapping or touching ranges; an empty or inverted range is an error."""
    out: list[tuple[bytes, bytes]] = []
    for lo, hi in sorted(ranges):
        if not lo < hi:
            raise LocalProtocolError("interest range with lo >= hi")
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def intersect(a: Interests, b: Interests) -> Interests:
    """The ranges covered by both (inputs normalized)."""
    out: list[tuple[bytes, bytes]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _start(r: tuple[bytes, bytes]) -> bytes:
    return r[0]


def within(ranges: Interests, lo: bytes, hi: bytes) -> bool:
    """Whether [lo, hi) lies inside one of the (normalized) ranges."""
    i = bisect_right(ranges, lo, key=_start) - 1
    return i >= 0 and ranges[i][0] <= lo and hi <= ranges[i][1]


def clip(lo: bytes, hi: bytes, ranges: Interests) -> list[tuple[bytes, bytes]]:
    """The pieces of [lo, hi) that lie inside ``ranges``."""
    return [
        (max(lo, r_lo), min(hi, r_hi)) for r_lo, r_hi in ranges if max(lo, r_lo) < min(hi, r_hi)
    ]
