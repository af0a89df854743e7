"""Counters of relaying (read by /metrics); kept apart so that both the relay layer and the
library overrides that count into it (``node.p2p.compat.relay``) import it without a cycle."""

from __future__ import annotations

from collections import Counter

__all__ = ["RelayStats"]


class RelayStats:
    """Counters of relaying, for /metrics."""

    def __init__(self) -> None:
        self.relayed_bytes = 0  # bytes we forwarded for others as a relay
        self.paced_s = 0.0  # seconds our rate limit held circuits back
        self.reservations_made = 0
        self.reservations_refused = 0
        self.punch_ok = 0
        self.punch_failed = 0
        self.circuit_dials_ok = 0
        self.circuit_dials_failed = 0
        # Refused because the source network's share was used, by "reservation"/"circuit".
        self.share_refused: Counter[str] = Counter()
