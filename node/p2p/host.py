"""The p2p layer of syncnode: a hardened wrapper around py-libp2p 0.8.1.

Only ``node/p2p*.py`` import libp2p. Everything above (the daemon) sees peer ids as ``str``,
payloads as ``bytes``, trio channels, and the errors of :mod:`node.p2p.frames`.

Usage::

    async with open_host(key, P2PConfig(), clock=SystemClock()) as host:  # node.p2p.run
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

import contextlib
import logging
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace

import trio
from libp2p.abc import IHost, INetConn
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pubsub import Pubsub

from node.clock import Clock
from node.p2p import compat
from node.p2p.conns import InboundGuard
from node.p2p.dht import Discovery
from node.p2p.dialback import DialBackServer
from node.p2p.dialer import connect
from node.p2p.frames import (
    DialError,
    FramedStream,
    P2PError,
)
from node.p2p.gossip import GossipTopics
from node.p2p.interfaces import interface_ips
from node.p2p.peer_table import PeerTable
from node.p2p.records import LocalRecord
from node.p2p.relay import RelayLayer
from node.p2p.scope_guard import Refusals, conn_source_ip
from node.p2p.scoring import PeerScoring
from node.p2p.setup import connection_direction
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
from sync.own_addrs import own_addrs

__all__ = ["P2PHost"]

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
        clock: Clock,
        guard: InboundGuard,
        evictions: trio.MemoryReceiveChannel[str],
        bans: BanList | None = None,
        relay: RelayLayer | None = None,
        addr_refused: Refusals | None = None,
        scoring: PeerScoring | None = None,
    ) -> None:
        """``guard`` and ``relay`` were built before this host (the libp2p host they serve is
        under it), and report to it through what they were given: the guard puts the peers it
        evicts into ``evictions``, which this host disconnects. ``scoring``: the peers' scores,
        charged with the transport's own violations (and by ``PeerStanding``); without it
        nothing is charged."""
        self._host = host
        # The node's one clock: bans, connection ages, the connection manager (membership's too).
        self.clock = clock
        self.relay = relay
        # Addresses peers told us that were out of their scope, by (via, reason): the layer's
        # own (identify, hole punching, GossipSub PX) and the daemon's (peer exchange, DHT).
        self.addr_refused = addr_refused if addr_refused is not None else Refusals()
        self._pubsub = pubsub
        self._discovery = discovery
        self.config = config
        self.peer_id = peer_id
        self.stats = stats
        self.bans = bans if bans is not None else BanList(clock=self.clock)
        self._nursery = nursery
        self.guard = guard
        self.scoring = scoring
        self._table = PeerTable(config, stats, self.guard, self.clock)
        self._peers = self._table.peers
        nursery.start_soon(self._evict, evictions)
        self.local_record = LocalRecord(host.get_id(), host.get_private_key(),
                                        self.advertised_addrs())
        self._streams = Streams(host=host, config=config, stats=stats, bans=self.bans,
                                connected=self._peers.__contains__, spoke=self.guard.heard_from,
                                clock=self.clock)
        self._gossip = GossipTopics(pubsub=pubsub, router=router, config=config,
                                    clock=self.clock, peer_id=peer_id, stats=stats,
                                    nursery=nursery)
        self._closing = False
        # Our dials in flight, per peer: the ``forget`` count when each began; and the peers
        # ``forget`` came for while one was in flight (see ``forget``; both bounded by dials).
        self._dials: dict[str, list[int]] = {}
        self._forgotten: dict[str, int] = {}
        self._forgets = 0
        self._opened_at: weakref.WeakKeyDictionary[INetConn, float] = weakref.WeakKeyDictionary()

    # -- addresses and connections --------------------------------------------------------

    @property
    def libp2p_host(self) -> IHost:
        """The py-libp2p host under this one, through its public interface only: for test
        harnesses that misbehave below our stack (a hostile peer's raw streams and handlers).
        The node itself goes through this class's methods."""
        return self._host

    @property
    def listen_addrs(self) -> list[str]:
        """Full multiaddrs we listen on, with actual bound ports and ``/p2p/<peer id>``."""
        return [str(a) for a in self._host.get_addrs()]

    def advertised_addrs(self, confirmed: Sequence[str] = ()) -> list[str]:
        """What others may dial us at: ``confirmed`` (reachable by dial-back), our listen
        addresses (a wildcard one as the interfaces' addresses: ``sync.own_addrs``), then
        our addresses through the relays that hold a reservation for us."""
        own = own_addrs(self.listen_addrs, interface_ips(self.clock.now()), confirmed)
        return own + (self.relay.relayed_addrs() if self.relay is not None else [])

    def path(self, peer_id: str) -> str | None:
        """``"direct"`` or ``"relayed"`` (every connection to the peer goes through a relay),
        None when not connected."""
        if self.relay is not None:
            return self.relay.path(peer_id)
        return "direct" if peer_id in self._peers else None

    async def connect(self, address: str, *, verify: bool = False) -> str:
        """Connect to ``/ip4|ip6|dns4|dns6/.../tcp/.../p2p/<peer id>`` or a relayed address;
        returns the peer id (:func:`node.p2p.dialer.connect`: errors, ``verify``)."""
        peer = address.rsplit("/p2p/", 1)[-1]
        began = self._forgets
        self._dials.setdefault(peer, []).append(began)
        try:
            reached = await connect(self, self._host, address, verify=verify)
        finally:
            dials = self._dials[peer]
            dials.remove(began)
            doomed = self._forgotten.get(peer, -1) > began
            if not dials:
                del self._dials[peer]
                self._forgotten.pop(peer, None)
        if doomed:  # ``forget`` came while this dial was in flight: what it opened must go
            await self.disconnect(reached)
            raise DialError(f"{peer} was forgotten while this dial was in flight")
        return reached

    async def forget(self, peer_id: str) -> None:
        """Close every connection to ``peer_id``, and those our dials in flight to it open
        when they complete (``peers forget``: a redial that began before must not reconnect
        it, nor teach its address back to the address book)."""
        self._forgets += 1
        if peer_id in self._dials:
            self._forgotten[peer_id] = self._forgets
        await self.disconnect(peer_id)

    def ban(self, peer_id: str, seconds: float) -> None:
        """Refuse ``peer_id`` (connections both ways, inbound streams) for ``seconds`` and drop
        its current connection."""
        self.bans.ban(peer_id, self.clock.now() + seconds)
        if peer_id in self._peers and not self._closing:
            self._nursery.start_soon(self.disconnect, peer_id)

    def penalise(self, peer_id: str, reason: str, count: float = 1.0) -> bool:
        """Lower ``peer_id``'s score (``scoring``); ban it when that says so. True when this
        banned it."""
        if self.scoring is None or not peer_id or peer_id == self.peer_id:
            return False
        seconds = self.scoring.charge(peer_id, reason, count)
        if seconds is None:
            return False
        self.ban(peer_id, seconds)
        return True

    async def _evict(self, evictions: trio.MemoryReceiveChannel[str]) -> None:
        """Disconnect each peer the guard evicted for a newcomer (without waiting)."""
        async for peer_id in evictions:
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
        self._table.sweep(peer_id)

    def sweep_connections(self) -> None:
        """Let go of peers whose connections all closed without libp2p's notice
        (:mod:`node.p2p.peer_table`); membership calls it on each housekeeping tick."""
        self._table.sweep()

    async def drop(self, peer_id: str, timeout: float = 5.0, *,
                   opened_before: float | None = None) -> None:
        """Close every connection to ``peer_id`` now, even one whose peer went silent
        (its socket first: :mod:`node.p2p.teardown`); with ``opened_before`` (``clock.now()``
        when a failed ping went out) only those opened before it: a relayed connection the
        peer opened since is not the dead one (docs/network.md, "Network back")."""
        network = self._host.get_network()
        conns = list(network.get_connections(ID.from_base58(peer_id)))
        doomed = [c for c in conns if opened_before is None
                  or self._opened_at.get(c, -math.inf) < opened_before]
        for conn in doomed:
            abort_socket(conn)
        with trio.move_on_after(timeout):
            if len(doomed) == len(conns):
                await self.disconnect(peer_id)
            else:
                for conn in doomed:
                    with contextlib.suppress(Exception):
                        await conn.close()
        if peer_id in self._peers and not network.get_connections(ID.from_base58(peer_id)):
            self._table.gone(peer_id)

    def connected_peers(self) -> list[str]:
        return sorted(self._peers)

    def source_ip(self, peer_id: str) -> str | None:
        """The IP we reach ``peer_id`` on (its relay's when relayed; None: not connected):
        what the addresses it tells us are checked against (sync.membership.scope)."""
        network = self._host.get_network()
        for conn in network.get_connections(ID.from_base58(peer_id)):
            return conn_source_ip(conn, network)
        return None

    def dialback_server(self, remote_ip: Callable[[str], str | None], min_gap_s: float,
                        clock: Clock) -> DialBackServer:
        """A server of dial-back requests over this host (:mod:`node.p2p.dialback`):
        ``remote_ip`` gives a peer's direct remote IP, the only one it may ask us to dial."""
        return DialBackServer(self._host, remote_ip, self.config.dial_timeout,
                              min_gap_s=min_gap_s, clock=clock)

    def peer_info(self, peer_id: str) -> ConnectedPeer | None:
        peer = self._peers.get(peer_id)
        # The address of its direct connection once a relayed one was upgraded (membership's
        # liveness rule tells remote peers from LAN neighbours by it).
        return None if peer is None else self._current(peer)

    def latencies(self) -> dict[str, float]:
        """Each connected peer's measured round trip, in seconds (peers not yet measured are
        left out): what Recon's rounds weigh their peers by."""
        return {p: peer.latency_s for p, peer in self._peers.items() if peer.latency_s is not None}

    def peers(self) -> list[ConnectedPeer]:
        return [self._current(self._peers[p]) for p in sorted(self._peers)]

    def _current(self, peer: ConnectedPeer) -> ConnectedPeer:
        """``peer`` with the address of its direct connection once a relayed one was upgraded."""
        if self.relay is not None and (address := self.relay.direct_address(peer.peer_id)):
            return replace(peer, address=address) if address != peer.address else peer
        return peer

    def peer_events(self) -> trio.MemoryReceiveChannel[PeerEvent]:
        """A new channel of connect/disconnect events (:meth:`PeerTable.events`)."""
        return self._table.events()

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
        self._opened_at[conn] = self.clock.now()
        peer_id = conn.muxed_conn.peer_id.to_base58()
        forgotten = self._forgotten.get(peer_id)
        if (forgotten is not None and connection_direction(conn) == "outbound"
                and all(began < forgotten for began in self._dials.get(peer_id, ()))):
            # Opened by a dial that began before ``forget``: never announced (membership
            # would learn the address back from it), closed by that dial's ``connect``.
            return
        peer = self._table.opened(conn)
        if peer is None:
            return
        if self.config.ping_on_connect:
            self._nursery.start_soon(self._measure_latency, peer)
        if self._discovery is not None:
            self._nursery.start_soon(self._discovery.add_peer, peer)

    def _on_disconnected(self, conn: INetConn) -> None:
        self._table.closed(conn)
        if compat.window_overrun(conn.muxed_conn):  # the session was ended for it
            self.stats.yamux_window_overruns += 1
            # The peer broke the transport's rules (compat entry Y4).
            self.penalise(conn.muxed_conn.peer_id.to_base58(), "protocol")

    async def _measure_latency(self, peer: str) -> None:
        try:
            await self.ping(peer)
        except Exception as exc:  # best effort: latency stays None
            logger.debug("latency probe to %s failed: %s", peer, exc)

    def _close_channels(self) -> None:
        self._closing = True
        self._table.close()
        self._gossip.close()
