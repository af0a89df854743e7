"""When to ask for peer records next: often while a node has few connections, seldom after.

A node that has just joined knows little more than its bootstrap peer, and the peers that join
that bootstrap peer after it are news it only hears at its next exchange. While it holds fewer
connections than the connection manager's low watermark, it is one departure away from being
cut off (a home behind NAT cannot be dialled by the peers it has not told about itself), so it
asks ``THIN_SHARE`` of the interval apart; once it holds enough, the records change slowly and
the full interval is enough.
"""

from __future__ import annotations

__all__ = ["JITTER", "THIN_SHARE", "px_delay"]

#: Below the low watermark: 5 s apart at the default 30 s interval.
THIN_SHARE = 1 / 6
#: The delay is spread over this share of itself either way, so that the peers a group's
#: members ask do not fall into step.
JITTER = (0.75, 1.25)


def px_delay(connected: int, low_watermark: int, interval_s: float, spread: float) -> float:
    """Seconds until the next exchange; ``spread`` is drawn from ``JITTER``."""
    if not JITTER[0] <= spread <= JITTER[1]:
        raise ValueError(f"spread {spread} outside {JITTER}")
    base = interval_s * THIN_SHARE if connected < low_watermark else interval_s
    return base * spread
