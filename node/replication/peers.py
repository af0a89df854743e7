"""Known peers: dialled at start-up, remembered in the database, redialled with back-off.

When to dial whom is ``sync.dialing.DialSchedule``; this module dials, stores and sleeps.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

import trio

from node.p2p import P2PError, P2PHost
from node.replication.clock import Clock
from node.store.events import EventStore
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import delete_state, list_state, put_state
from sync.dialing import MIN_BACKOFF_S, DialSchedule, KnownPeer, peer_id_of_addr

__all__ = ["KnownPeer", "PeerManager", "peer_id_of_addr"]

log = logging.getLogger("syncnode.peers")
_PREFIX = "peers/"


class PeerManager:
    """Keeps a connection to every known peer; ``join`` adds one for good."""

    def __init__(self, host: P2PHost, store: EventStore, metrics: Metrics,
                 clock: Clock, *,
                 on_joined: Callable[[str, str], None] | None = None,
                 on_forgotten: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.host = host
        # Backoff and redial times on the injected clock (trio's: MockClock in tests).
        self.clock = clock
        self.store = store
        self.metrics = metrics
        self.schedule = DialSchedule(host.peer_id)
        self._wake = trio.Event()
        # Told of each address ``join`` proved (the address book keeps it too), and of each
        # peer forgotten (the address book drops it too).
        self.on_joined = on_joined
        self.on_forgotten = on_forgotten

    @property
    def known(self) -> dict[str, KnownPeer]:
        return self.schedule.known

    async def load(self, bootstrap: tuple[str, ...]) -> None:
        saved = await self.store.read(list_state, _PREFIX)
        for key, raw in saved.items():
            try:
                addr = json.loads(raw)["addr"]
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring unreadable known-peer entry", extra=kv(key=key))
                continue
            self.schedule.remember(addr)
        for addr in bootstrap:
            self.schedule.remember(addr)

    async def join(self, addr: str) -> str:
        """Connect now (errors propagate to the caller) and remember the peer across restarts."""
        if peer_id_of_addr(addr) is None:
            raise ValueError(f"multiaddr must end in /p2p/<peer id>: {addr}")
        # verify: dial this very address even when a connection to the peer exists already,
        # so that only an address proven to reach the peer is stored.
        peer_id = await self.host.connect(addr, verify=True)
        peer = self.schedule.remember(addr)
        if peer is not None:
            self.schedule.connected(peer)
        entry = json.dumps({"addr": addr}).encode()
        await self.store.write(put_state, _PREFIX + peer_id, entry, int(self.clock.wall() * 1000))
        self.metrics.inc("peer_joins_total")
        if self.on_joined is not None:
            self.on_joined(peer_id, addr)
        self._wake.set()
        return peer_id

    async def forget(self, peer_id: str) -> bool:
        """Stop redialling ``peer_id``, drop its stored address and disconnect it.

        Returns False when it was not a known peer. It may connect to us again on its own.
        """
        known = self.schedule.forget(peer_id)
        if self.on_forgotten is not None:
            await self.on_forgotten(peer_id)
        saved = await self.store.read(list_state, _PREFIX + peer_id)
        await self.store.write(delete_state, _PREFIX + peer_id)
        await self.host.forget(peer_id)
        return known or (_PREFIX + peer_id) in saved

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_disconnects)
            await self._dial_loop()

    async def _watch_disconnects(self) -> None:
        async for event in self.host.peer_events():
            if event.kind == "disconnected" and event.peer_id in self.known:
                self.poke()  # redial now (then with back-off), not at the next periodic check

    async def _dial_loop(self) -> None:
        """Dial every known peer that is not connected, backing off per peer on failure."""
        while True:
            plan = self.schedule.plan(self.clock.now(), set(self.host.connected_peers()),
                                      self.host.is_banned)
            async with trio.open_nursery() as nursery:
                for peer in plan.dial:
                    nursery.start_soon(self._dial, peer)
            self._wake = trio.Event()
            with trio.move_on_after(max(plan.wake_at - self.clock.now(), MIN_BACKOFF_S)):
                await self._wake.wait()

    def poke(self) -> None:
        """Re-check connections now (e.g. after a disconnect)."""
        self._wake.set()

    async def _dial(self, peer: KnownPeer) -> None:
        try:
            await self.host.connect(peer.addr)
        except P2PError as exc:
            delay = self.schedule.failed(peer, self.clock.now())
            self.metrics.inc("peer_dial_failures_total")
            log.info("dial failed", extra=kv(peer=peer.peer_id, retry_in_s=delay, error=str(exc)))
        else:
            self.schedule.connected(peer)
            log.info("connected", extra=kv(peer=peer.peer_id))
