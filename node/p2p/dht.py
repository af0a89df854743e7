"""Peer discovery through the Kademlia DHT: provider records under rendezvous strings.

A rendezvous string (for syncnode: the CIP-124 rendezvous keys, one for the network and one per
channel) becomes the DHT key ``sha256-multihash(utf8(rendezvous))``. ``advertise`` stores a
provider record "this peer serves <rendezvous>" on the peers closest to that key; ``find``
looks the providers up and returns their addresses. Provider records expire (libp2p
republishes its own on its maintenance cycle); the daemon re-advertises periodically anyway.
"""

from __future__ import annotations

import hashlib
import logging

import trio
from libp2p.abc import IHost
from libp2p.kad_dht.kad_dht import DHTMode, KadDHT
from libp2p.peer.id import ID

from node.p2p.frames import P2PTimeoutError
from node.p2p.types import P2PConfig

__all__ = ["Discovery", "rendezvous_key"]

logger = logging.getLogger("node.p2p")

_SHA2_256_MULTIHASH_PREFIX = b"\x12\x20"


def rendezvous_key(rendezvous: str) -> str:
    """The DHT key of a rendezvous string: hex of its sha2-256 multihash."""
    digest = hashlib.sha256(rendezvous.encode("utf-8")).digest()
    return (_SHA2_256_MULTIHASH_PREFIX + digest).hex()


class Discovery:
    """One host's DHT node (server mode: it also stores records for others)."""

    def __init__(self, host: IHost, config: P2PConfig) -> None:
        self.dht = KadDHT(host, DHTMode.SERVER if config.dht_server_mode else DHTMode.CLIENT)
        self._timeout = config.dht_timeout
        self._allowed = config.allowed_peers
        self._self_id = host.get_id().to_base58()

    async def add_peer(self, peer_id: str) -> None:
        # Connected peers seed the routing table; without them a fresh node knows nobody.
        try:
            await self.dht.add_peer(ID.from_base58(peer_id), skip_server_mode_check=True)
        except Exception:
            logger.debug("adding %s to the DHT routing table failed", peer_id, exc_info=True)

    async def advertise(self, rendezvous: str) -> bool:
        """Announce ourselves as a provider of ``rendezvous``; True if some peer stored it."""
        with trio.move_on_after(self._timeout) as scope:
            return bool(await self.dht.provide(rendezvous_key(rendezvous)))
        if scope.cancelled_caught:
            raise P2PTimeoutError(f"DHT advertise of {rendezvous!r} timed out")
        return False

    async def find(self, rendezvous: str, count: int) -> dict[str, list[str]]:
        """Providers of ``rendezvous`` (not us; members only in a closed group)."""
        providers = None
        with trio.move_on_after(self._timeout):
            providers = await self.dht.find_providers(rendezvous_key(rendezvous), count)
        if providers is None:
            raise P2PTimeoutError(f"DHT lookup of {rendezvous!r} timed out")
        found: dict[str, list[str]] = {}
        for info in providers:
            peer = info.peer_id.to_base58()
            if peer == self._self_id or (self._allowed is not None and peer not in self._allowed):
                continue
            addrs = found.setdefault(peer, [])
            for addr in info.addrs:
                text = str(addr)
                full = text if "/p2p/" in text else f"{text}/p2p/{peer}"
                if full not in addrs:
                    addrs.append(full)
        return found
