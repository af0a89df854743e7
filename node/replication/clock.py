"""The replication drivers' clock: :mod:`node.clock`, which the p2p layer shares (its connection
manager, bans and liveness evidence compare instants with membership's), so it lives below
both packages; the drivers import it from here as before."""

from __future__ import annotations

from node.clock import Clock, SystemClock, TrioWallClock

__all__ = ["Clock", "SystemClock", "TrioWallClock"]
