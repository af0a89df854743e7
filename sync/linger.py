"""When to hold an outgoing gossip message back so that others can join it (linger.ms), sans-IO.

py-libp2p's cost is per gossip message, not per byte, so SDS messages that leave together in
one gossip message are much cheaper than the same messages one by one. Holding a message back
only pays when more are due within the linger: ``Linger`` keeps a moving average of the gaps
between outgoing messages and asks for the delay only when that average is shorter than the
linger, so a quiet node sends at once and only a busy one trades a little latency for batches.
"""

from __future__ import annotations

import math

__all__ = ["Linger"]

# Weight of the newest gap in the moving average.
GAP_WEIGHT = 0.2
# A quiet spell longer than this counts as this long, so the average recovers quickly.
MAX_GAP_S = 5.0


class Linger:
    """The linger rule; ``now`` is the caller's monotonic clock, in seconds."""

    def __init__(self, linger_s: float) -> None:
        self.linger_s = linger_s
        self._last = -math.inf
        self._gap = math.inf

    def note(self, now: float) -> None:
        """A message was queued for sending at ``now``."""
        gap = min(now - self._last, MAX_GAP_S)
        self._last = now
        self._gap = gap if self._gap == math.inf else self._gap + GAP_WEIGHT * (gap - self._gap)

    def delay(self, now: float, *, batch_full: bool = False) -> float:
        """Seconds to wait before sending what is queued: the linger while messages come
        faster than one per linger on average, else 0. ``batch_full``: what is queued already
        fills a gossip message; waiting would not make it any bigger, only cap the sender at
        one gossip message per linger (issue 31: a batch publish of 200 events left in 11
        gossip messages over 3.3 s, ~60 events/s per node at most)."""
        if self.linger_s <= 0 or batch_full:
            return 0.0
        expected = max(self._gap, now - self._last)
        return self.linger_s if expected < self.linger_s else 0.0
