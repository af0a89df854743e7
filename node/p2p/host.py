"""The p2p layer of syncnode: a hardened wrapper around py-libp2p 0.8.1.

Only ``node/p2p*.py`` import libp2p. Everything above (the daemon) sees peer ids as ``str``,
payloads as ``bytes``, trio channels, and the errors of :mod:`node.p2p.frames`.

Usage::

    async with open_host(key, P2PConfig()) as host:  # node.p2p.run
        host.set_stream_handler("/syncnode/recon/1.0.0", handle)
        peer = await host.connect("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooW...")
        async with await host.open_stream(peer, "/syncnode/recon/1.0.0") as stream:
            await stream.send(b"hello")
            reply = await stream.receive()
        messages = await host.subscribe("channel-a")
        await host.publish("channel-a", b"event")

Design notes, wire formats and measured figures: docs/p2p.md.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import trio
from libp2p.abc import IHost, INetConn
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pubsub import Pubsub

from node.p2p.addrs import dial_fresh, dial_target, probe
from node.p2p.conns import InboundGuard
from node.p2p.dht import Discovery
from node.p2p.frames import (
    DialError,
    FramedStream,
    P2PError,
    PeerRefusedError,
)
from node.p2p.gossip import GossipTopics, fan_out
from node.p2p.records import LocalRecord
from node.p2p.relay import RelayLayer
from node.p2p.setup import (
    connection_direction,
    remote_address,
)
from node.p2p.streams import StreamHandler, Streams
from node.p2p.teardown import abort_socket
from node.p2p.types import (
    BanList,
    ConnectedPeer,
    GossipMessage,
    P2PConfig,
    P2PStats,
    PeerEvent,
)

__all__ = ["P2PHost", "count_refusal"]

logger = logging.getLogger("node.p2p")



class P2PHost:
    """A running libp2p host. Obtain one from :func:`open_host`; do not construct directly."""

    def __init__(
        self,
        *,
        host: IHost,
        pubsub: Pubsub,
        router: GossipSub,
        discovery: Discovery | None,
        config: P2PConfig,
        peer_id: str,
        stats: P2PStats,
        nursery: trio.Nursery,
        bans: BanList | None = None,
        relay: RelayLayer | None = None,
        guard: InboundGuard | None = None,
    ) -> None:
        self._host = host
        self.relay = relay
        self._pubsub = pubsub
        self._discovery = discovery
        self.config = config
        self.peer_id = peer_id
        self.stats = stats
        self.bans = bans if bans is not None else BanList()
        self._nursery = nursery
        self._peers: dict[str, ConnectedPeer] = {}
        self._conn_count: dict[str, int] = {}
        self._event_sinks: list[trio.MemorySendChannel[PeerEvent]] = []
        self.guard = guard if guard is not None else InboundGuard(config.conn_limits)
        self.guard.evict = self._evict
        if relay is not None:
            relay.on_spoke = self.guard.spoke
        self.local_record = LocalRecord(host.get_id(), host.get_private_key(),
                                        self.listen_addrs)
        self._streams = Streams(host=host, config=config, stats=stats, bans=self.bans,
                                connected=self._peers.__contains__, spoke=self.guard.spoke)
        self._gossip = GossipTopics(pubsub=pubsub, router=router, config=config,
                                    peer_id=peer_id, stats=stats, nursery=nursery)
        self._closing = False

    # -- addresses and connections --------------------------------------------------------

    @property
    def listen_addrs(self) -> list[str]:
        """Full multiaddrs we listen on, with actual bound ports and ``/p2p/<peer id>``."""
        return [str(a) for a in self._host.get_addrs()]

    @property
    def advertised_addrs(self) -> list[str]:
        """What others may dial us at: listen addresses (never a wildcard one) and our
        addresses through the relays that hold a reservation for us."""
        own = [a for a in self.listen_addrs if "/0.0.0.0/" not in a and "/::/" not in a]
        return own + (self.relay.relayed_addrs() if self.relay is not None else [])

    def path(self, peer_id: str) -> str | None:
        """``"direct"`` or ``"relayed"`` (every connection to the peer goes through a relay),
        None when not connected."""
        if self.relay is not None:
            return self.relay.path(peer_id)
        return "direct" if peer_id in self._peers else None

    async def connect(self, address: str, *, verify: bool = False) -> str:
        """Connect to ``/ip4|ip6|dns4|dns6/.../tcp/.../p2p/<peer id>``; returns the peer id.

        ``verify``: when already connected to that peer, still dial ``address`` (a probe) so
        that a wrong or stale address is an error rather than a silent success.

        :raises PeerRefusedError: the peer is outside ``allowed_peers``.
        :raises DialError: bad address, unreachable, handshake failure, or ``dial_timeout``.
        """
        if "/p2p-circuit" in address:
            return await self._connect_relayed(address)
        info, resolved = await dial_target(address, self.config.dial_timeout)
        peer = info.peer_id.to_base58()
        self._check_dialable(peer, address)
        if peer in self._peers:
            if verify:
                try:
                    await probe(self._host, resolved, peer, self.config.dial_timeout)
                except DialError:
                    self.stats.dial_failures += 1
                    raise
            return peer
        try:
            await dial_fresh(self._host, info, address, self.config.dial_timeout)
        except DialError:
            self.stats.dial_failures += 1
            raise
        return peer

    async def _connect_relayed(self, address: str) -> str:
        if self.relay is None:
            raise DialError(f"relayed addresses need [reachability] enabled: {address}")
        peer = address.rsplit("/p2p/", 1)[-1]
        self._check_dialable(peer, address)
        if peer in self._peers:
            return peer
        return await self.relay.dial_circuit(address, self.config.dial_timeout)

    def _check_dialable(self, peer: str, address: str) -> None:
        """Refuse to dial ourselves, a peer outside ``allowed_peers`` or a banned one."""
        if peer == self.peer_id:
            raise DialError(f"refusing to dial ourselves at {address}")
        allowed = self.config.allowed_peers
        if allowed is not None and peer not in allowed:
            count_refusal(self.stats, peer, "outbound", "not in allowed_peers")
            raise PeerRefusedError(f"peer {peer} is not in allowed_peers")
        if self.bans.is_banned(peer):
            count_refusal(self.stats, peer, "outbound", "banned")
            raise PeerRefusedError(f"peer {peer} is banned for misbehaviour")

    def ban(self, peer_id: str, seconds: float) -> None:
        """Refuse ``peer_id`` (connections both ways, inbound streams) for ``seconds`` and drop
        its current connection."""
        self.bans.ban(peer_id, time.monotonic() + seconds)
        if peer_id in self._peers and not self._closing:
            self._nursery.start_soon(self.disconnect, peer_id)

    def _evict(self, peer_id: str) -> None:
        if not self._closing:
            self._nursery.start_soon(self.disconnect, peer_id)

    def note_gossip_speakers(self) -> None:
        """Peers GossipSub negotiated with have spoken one of our protocols."""
        for peer in list(self._pubsub.peers):
            self.guard.spoke(peer.to_base58())

    def is_banned(self, peer_id: str) -> bool:
        return self.bans.is_banned(peer_id)

    async def disconnect(self, peer_id: str) -> None:
        """Close every connection to ``peer_id`` (no error if there is none)."""
        try:
            await self._host.disconnect(ID.from_base58(peer_id))
        except Exception:
            logger.debug("disconnect from %s failed", peer_id, exc_info=True)

    async def drop(self, peer_id: str, timeout: float = 5.0) -> None:
        """Close every connection to ``peer_id`` now, even one whose peer went silent
        (its socket first: :mod:`node.p2p.teardown`)."""
        network = self._host.get_network()
        for conn in network.get_connections(ID.from_base58(peer_id)):
            abort_socket(conn)
        with trio.move_on_after(timeout):
            await self.disconnect(peer_id)
        if peer_id in self._peers and not network.get_connections(ID.from_base58(peer_id)):
            # An earlier polite close, cut short, left libp2p without a notification.
            self._conn_count.pop(peer_id, None)
            self._gone(peer_id)

    def connected_peers(self) -> list[str]:
        return sorted(self._peers)

    def peer_info(self, peer_id: str) -> ConnectedPeer | None:
        return self._peers.get(peer_id)

    def peers(self) -> list[ConnectedPeer]:
        return [self._current(self._peers[p]) for p in sorted(self._peers)]

    def _current(self, peer: ConnectedPeer) -> ConnectedPeer:
        """``peer`` with the address of its direct connection once a relayed one was upgraded."""
        if self.relay is not None and (address := self.relay.direct_address(peer.peer_id)):
            return replace(peer, address=address) if address != peer.address else peer
        return peer

    def peer_events(self) -> trio.MemoryReceiveChannel[PeerEvent]:
        """A new channel of connect/disconnect events from now on (one per listener).

        If the listener falls ``peer_event_queue_size`` events behind, further events are
        dropped and counted in ``stats.peer_events_dropped``. Closed when the host stops.
        """
        send, receive = trio.open_memory_channel[PeerEvent](self.config.peer_event_queue_size)
        self._event_sinks.append(send)
        return receive

    async def ping(self, peer_id: str) -> float:
        """Round-trip time to a connected peer with libp2p's ping protocol, in seconds."""
        rtt = await self._streams.ping(peer_id)
        if peer_id in self._peers:
            self._peers[peer_id] = replace(self._peers[peer_id], latency_s=rtt)
        return rtt

    # -- streams (node.p2p.streams) ------------------------------------------------------

    def set_stream_handler(self, protocol_id: str, handler: StreamHandler) -> None:
        """Serve ``protocol_id``: each inbound stream runs ``handler(FramedStream)``
        (:meth:`Streams.set_handler`)."""
        self._streams.set_handler(protocol_id, handler)

    def remove_stream_handler(self, protocol_id: str) -> None:
        """Stop serving ``protocol_id``: peers' new streams for it are refused in protocol
        negotiation (streams already open run to their end)."""
        self._streams.remove_handler(protocol_id)

    async def open_stream(self, peer_id: str, protocol_id: str) -> FramedStream:
        """Open a framed stream to a connected peer; use it with ``async with``.

        :raises StreamOpenError: not connected, protocol refused, or ``stream_open_timeout``.
        """
        return await self._streams.open(peer_id, protocol_id)

    # -- gossipsub (node.p2p.gossip) -------------------------------------------------------

    async def subscribe(self, topic: str) -> trio.MemoryReceiveChannel[GossipMessage]:
        """A new channel receiving every message on ``topic``: :meth:`GossipTopics.subscribe`."""
        return await self._gossip.subscribe(topic)

    async def unsubscribe(self, topic: str) -> None:
        await self._gossip.unsubscribe(topic)

    async def publish(self, topic: str, data: bytes) -> None:
        """Broadcast ``data`` on ``topic`` (need not be subscribed)."""
        await self._gossip.publish(topic, data)

    def gossip_peers(self, topic: str) -> list[str]:
        return self._gossip.gossip_peers(topic)

    def mesh_peers(self, topic: str) -> list[str]:
        return self._gossip.mesh_peers(topic)

    def mesh_members(self) -> set[str]:
        return self._gossip.mesh_members()

    # -- DHT discovery (config.enable_dht) ------------------------------------------------

    async def advertise(self, rendezvous: str) -> bool:
        """Put a provider record "we serve ``rendezvous``" into the DHT; re-run periodically.

        :returns: whether at least one peer stored the record.
        :raises P2PError: the DHT is disabled; :class:`P2PTimeoutError` after ``dht_timeout``.
        """
        return await self._dht().advertise(rendezvous)

    async def find_peers(self, rendezvous: str, count: int = 20) -> dict[str, list[str]]:
        """Peers that advertised ``rendezvous``: peer id -> dialable ``/p2p/`` multiaddrs."""
        return await self._dht().find(rendezvous, count)

    def _dht(self) -> Discovery:
        if self._discovery is None:
            raise P2PError("DHT discovery is disabled (P2PConfig.enable_dht=False)")
        return self._discovery

    # -- connection bookkeeping (called from the libp2p notifee) --------------------------

    def _on_connected(self, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id.to_base58()
        self.stats.connections_opened += 1
        count = self._conn_count.get(peer, 0) + 1
        self._conn_count[peer] = count
        if count > 1 or self._closing:
            return
        address = remote_address(conn)
        direction = connection_direction(conn)
        self.guard.opened(peer, address, direction == "inbound")
        self._peers[peer] = ConnectedPeer(
            peer_id=peer, address=address, direction=direction, connected_since=time.time()
        )
        logger.info("connected to %s (%s, %s)", peer, direction, address)
        fan_out(self._event_sinks,
                PeerEvent("connected", peer, address=address, direction=direction),
                self.stats, "peer_events_dropped")
        if self.config.ping_on_connect:
            self._nursery.start_soon(self._measure_latency, peer)
        if self._discovery is not None:
            self._nursery.start_soon(self._discovery.add_peer, peer)

    def _on_disconnected(self, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id.to_base58()
        self.stats.connections_closed += 1
        count = self._conn_count.get(peer, 0) - 1
        if count > 0:
            self._conn_count[peer] = count
            return
        self._conn_count.pop(peer, None)
        self._gone(peer)

    def _gone(self, peer: str) -> None:
        self.guard.closed(peer)
        if self._peers.pop(peer, None) is None:
            return
        logger.info("disconnected from %s", peer)
        fan_out(self._event_sinks, PeerEvent("disconnected", peer), self.stats,
                "peer_events_dropped")

    async def _measure_latency(self, peer: str) -> None:
        try:
            await self.ping(peer)
        except Exception as exc:  # best effort: latency stays None
            logger.debug("latency probe to %s failed: %s", peer, exc)

    def _close_channels(self) -> None:
        self._closing = True
        for sink in self._event_sinks:
            sink.close()
        self._gossip.close()
        self._event_sinks.clear()


def count_refusal(stats: P2PStats, peer: str, direction: str, reason: str) -> None:
    if reason == "banned":
        stats.refused_banned += 1
    else:
        stats.refused_connections += 1
    logger.warning("refused %s connection with %s: %s", direction, peer, reason)
