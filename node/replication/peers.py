"""Known peers: dialled at start-up, remembered in the database, redialled with back-off."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import trio

from node.logs import kv
from node.metrics import Metrics
from node.p2p.host import P2PError, P2PHost
from node.store import EventStore
from storage import delete_state, list_state, put_state

__all__ = ["KnownPeer", "PeerManager", "peer_id_of_addr"]

log = logging.getLogger("syncnode.peers")
_PREFIX = "peers/"
MIN_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0


def peer_id_of_addr(multiaddr: str) -> str | None:
    parts = multiaddr.rstrip("/").split("/")
    return parts[-1] if len(parts) >= 2 and parts[-2] == "p2p" else None


@dataclass
class KnownPeer:
    peer_id: str
    addr: str
    failures: int = 0
    next_attempt: float = 0.0  # time.monotonic()


class PeerManager:
    """Keeps a connection to every known peer; ``join`` adds one for good."""

    def __init__(self, host: P2PHost, store: EventStore, metrics: Metrics) -> None:
        self.host = host
        self.store = store
        self.metrics = metrics
        self.known: dict[str, KnownPeer] = {}
        self._wake = trio.Event()

    async def load(self, bootstrap: tuple[str, ...]) -> None:
        saved = await self.store.read(list_state, _PREFIX)
        for key, raw in saved.items():
            try:
                addr = json.loads(raw)["addr"]
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring unreadable known-peer entry", extra=kv(key=key))
                continue
            self._remember(addr)
        for addr in bootstrap:
            self._remember(addr)

    def _remember(self, addr: str) -> KnownPeer | None:
        peer_id = peer_id_of_addr(addr)
        if peer_id is None or peer_id == self.host.peer_id:
            return None
        peer = self.known.get(peer_id)
        if peer is None:
            peer = self.known[peer_id] = KnownPeer(peer_id, addr)
        else:
            peer.addr = addr
        return peer

    async def join(self, addr: str) -> str:
        """Connect now (errors propagate to the caller) and remember the peer across restarts."""
        if peer_id_of_addr(addr) is None:
            raise ValueError(f"multiaddr must end in /p2p/<peer id>: {addr}")
        # verify: dial this very address even when a connection to the peer exists already,
        # so that only an address proven to reach the peer is stored.
        peer_id = await self.host.connect(addr, verify=True)
        peer = self._remember(addr)
        if peer is not None:
            peer.failures = 0
        entry = json.dumps({"addr": addr}).encode()
        await self.store.write(put_state, _PREFIX + peer_id, entry, int(time.time() * 1000))
        self.metrics.inc("peer_joins_total")
        self._wake.set()
        return peer_id

    async def forget(self, peer_id: str) -> bool:
        """Stop redialling ``peer_id``, drop its stored address and disconnect it.

        Returns False when it was not a known peer. It may connect to us again on its own.
        """
        known = self.known.pop(peer_id, None) is not None
        saved = await self.store.read(list_state, _PREFIX + peer_id)
        await self.store.write(delete_state, _PREFIX + peer_id)
        await self.host.disconnect(peer_id)
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
            connected = set(self.host.connected_peers())
            now = time.monotonic()
            next_due = now + MAX_BACKOFF_S
            async with trio.open_nursery() as nursery:
                for peer in list(self.known.values()):
                    if peer.peer_id in connected:
                        peer.failures = 0
                        continue
                    if self.host.is_banned(peer.peer_id):
                        # Not redialled while banned: checked again after the usual back-off.
                        continue
                    if peer.next_attempt <= now:
                        nursery.start_soon(self._dial, peer)
                    next_due = min(next_due, max(peer.next_attempt, now + MIN_BACKOFF_S))
            self._wake = trio.Event()
            with trio.move_on_after(max(next_due - time.monotonic(), MIN_BACKOFF_S)):
                await self._wake.wait()

    def poke(self) -> None:
        """Re-check connections now (e.g. after a disconnect)."""
        self._wake.set()

    async def _dial(self, peer: KnownPeer) -> None:
        try:
            await self.host.connect(peer.addr)
        except P2PError as exc:
            peer.failures += 1
            delay = min(MAX_BACKOFF_S, MIN_BACKOFF_S * 2 ** min(peer.failures, 10))
            peer.next_attempt = time.monotonic() + delay
            self.metrics.inc("peer_dial_failures_total")
            log.info("dial failed", extra=kv(peer=peer.peer_id, retry_in_s=delay, error=str(exc)))
        else:
            peer.failures = 0
            log.info("connected", extra=kv(peer=peer.peer_id))
