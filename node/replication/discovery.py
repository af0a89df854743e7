"""Peer discovery through the Kademlia DHT with the CIP-124 rendezvous keys.

Two keys, both in the eventId format (hex-encoded as the DHT record name):
``varint(0xce) varint(0x05) varint(network_id)`` for every peer of the network, and
``varint(0xce) varint(0x71) varint(network_id) last16(sha256(channel))`` per channel (the sort
value). A node advertises both kinds periodically and dials the peers it finds there, at
addresses in the scope of the peers it is connected to (``sync.membership.scope``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import trio

from node.p2p import P2PError, P2PHost
from node.replication.peers import PeerManager
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.membership.scope import addr_refusal
from sync.varint import uvarint

__all__ = ["DhtDiscovery", "channel_rendezvous", "network_rendezvous"]

log = logging.getLogger("syncnode.discovery")


def network_rendezvous(network_id: int) -> str:
    return (uvarint(0xCE) + uvarint(0x05) + uvarint(network_id)).hex()


def channel_rendezvous(network_id: int, channel: str) -> str:
    tail = hashlib.sha256(channel.encode()).digest()[-16:]
    return (uvarint(0xCE) + uvarint(0x71) + uvarint(network_id) + tail).hex()


class DhtDiscovery:
    def __init__(self, host: P2PHost, peers: PeerManager, metrics: Metrics, network_id: int,
                 channels: Sequence[str], interval_s: float) -> None:
        self.host = host
        self.peers = peers
        self.metrics = metrics
        self.keys = [network_rendezvous(network_id)] + [
            channel_rendezvous(network_id, c) for c in channels
        ]
        self.interval_s = interval_s

    async def run(self) -> None:
        while True:
            await self.round()
            await trio.sleep(self.interval_s)

    async def round(self) -> None:
        for key in self.keys:
            try:
                await self.host.advertise(key)
                found = await self.host.find_peers(key)
            except P2PError as exc:
                self.metrics.inc("dht_errors_total")
                log.info("dht round failed", extra=kv(key=key, error=str(exc)))
                continue
            log.debug("dht lookup", extra=kv(key=key, found=len(found)))
            for peer_id, addrs in found.items():
                # Kademlia lookups may already have connected us; what matters is that the
                # peer is now known, so it is redialled after restarts like a joined one.
                if peer_id == self.host.peer_id or peer_id in self.peers.known:
                    continue
                for addr in addrs:
                    if not self._in_scope(addr):
                        continue
                    try:
                        await self.peers.join(addr)
                    except (P2PError, ValueError):
                        continue
                    self.metrics.inc("dht_peers_found_total")
                    log.info("peer found through the DHT", extra=kv(peer=peer_id, key=key))
                    break

    def _in_scope(self, addr: str) -> bool:
        """A DHT answer may come from any peer we are connected to (the lookup does not say
        which): ``addr`` must be in the scope of one of them (sync.membership.scope). Names
        are kept: other implementations advertise them."""
        origins = {self.host.source_ip(p) for p in self.host.connected_peers()} or {None}
        reasons = [addr_refusal(addr, origin, names=True) for origin in origins]
        if None in reasons:
            return True
        self.host.addr_refused["dht", str(reasons[0])] += 1
        return False
