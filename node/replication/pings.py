"""Liveness pings, driven: one ping in flight per connected peer, its timeout counted even when
the ping itself never returns.

py-libp2p 0.8.1 can hang a stream open for good on a dead connection: when the open fails it
resets the half-open stream inside a shielded cancel scope, and on a connection whose TCP send
buffer is full (its peer went silent while we kept writing: gossip, relayed circuits) that
reset's write never drains. A ping awaited under a timeout then never comes back, no second
ping is sent (one in flight per peer), no failure is ever counted and the dead connection is
never closed: in an outage the cut-off node kept its public nodes "connected", so it dialled
nobody who could answer and noticed the network back only half a minute after it returned.
So each ping runs as a task of its own, and :meth:`PingRounds.check` (once a second) counts a
failure for every ping overdue by ``timeout_s``, and again each ``timeout_s`` it stays stuck.
An answer that arrives late still counts as an answer. The rules are in
``sync.membership.liveness``; this only measures time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import trio

from node.p2p import P2PError, P2PHost

__all__ = ["PingRounds"]


@dataclass
class _Flight:
    sent_at: float
    counted_at: float | None = None  # when its last failure was counted


class PingRounds:
    def __init__(self, host: P2PHost, timeout_s: float,
                 on_ok: Callable[[str], None],
                 on_failed: Callable[[str, float], None]) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.on_ok = on_ok  # (peer): it answered
        self.on_failed = on_failed  # (peer, sent_at): no answer (yet)
        self._flights: dict[str, _Flight] = {}

    def send(self, nursery: trio.Nursery, peers: list[str], now: float) -> None:
        """A ping to each of ``peers`` that has none in flight."""
        for peer in peers:
            if peer not in self._flights:
                flight = self._flights[peer] = _Flight(now)
                nursery.start_soon(self._ping, peer, flight)

    def check(self, now: float) -> None:
        """Count a failure for each ping overdue (and again each ``timeout_s`` it stays so)."""
        for peer, flight in list(self._flights.items()):
            since = flight.sent_at if flight.counted_at is None else flight.counted_at
            if now - since >= self.timeout_s:
                flight.counted_at = now
                self.on_failed(peer, flight.sent_at)

    async def _ping(self, peer: str, flight: _Flight) -> None:
        answered = False
        try:
            with contextlib.suppress(P2PError):
                await self.host.ping(peer)
                answered = True
        finally:
            current = self._flights.get(peer) is flight
            if current:
                del self._flights[peer]
        if not current:  # forgotten: its connection is gone, a new one may have come
            return
        if answered:
            self.on_ok(peer)
        elif flight.counted_at is None:  # failed before its timeout: count it now
            self.on_failed(peer, flight.sent_at)

    def forget(self, peer: str) -> None:
        """The peer is gone: a ping still stuck on its old connection counts no more."""
        self._flights.pop(peer, None)

    def in_flight(self) -> int:
        return len(self._flights)
