"""Caps on what peers may have in flight at once: per peer and for all peers together."""

from __future__ import annotations

__all__ = ["REFUSED_PENALTY", "InFlight"]

#: What a stream refused over the caps costs its peer (``sync.peerscore``): little, since an
#: honest peer may just be retrying, but a peer that keeps opening streams pays.
REFUSED_PENALTY = "busy"


class InFlight:
    """Counts open streams (or sessions); ``acquire`` refuses beyond the caps."""

    def __init__(self, per_peer: int, total: int) -> None:
        if per_peer < 1 or total < per_peer:
            raise ValueError("1 <= per_peer <= total is required")
        self.per_peer = per_peer
        self.total = total
        self._open: dict[str, int] = {}
        self._count = 0
        self.refused_total = 0

    def __len__(self) -> int:
        return self._count

    def of(self, peer: str) -> int:
        return self._open.get(peer, 0)

    def acquire(self, peer: str) -> bool:
        n = self._open.get(peer, 0)
        if n >= self.per_peer or self._count >= self.total:
            self.refused_total += 1
            return False
        self._open[peer] = n + 1
        self._count += 1
        return True

    def release(self, peer: str) -> None:
        n = self._open.get(peer, 0)
        if n <= 0:
            return
        self._count -= 1
        if n == 1:
            del self._open[peer]  # the table holds only peers with something open
        else:
            self._open[peer] = n - 1
