"""Who is connected, from libp2p's connection notifications.

One entry per peer however many connections it has (a relayed one and its direct upgrade, a
verify probe beside the connection): the first connection makes the peer connected, the last
one closing makes it gone, and each of those two moments is fanned out as a
:class:`~node.p2p.types.PeerEvent` to every listener (membership, Recon, known peers).
"""

from __future__ import annotations

import logging

import trio
from libp2p.abc import INetConn

from node.clock import Clock
from node.p2p.conns import InboundGuard
from node.p2p.gossip import fan_out
from node.p2p.setup import connection_direction, remote_address
from node.p2p.types import ConnectedPeer, P2PConfig, P2PStats, PeerEvent

__all__ = ["PeerTable"]

logger = logging.getLogger("node.p2p")


class PeerTable:
    def __init__(self, config: P2PConfig, stats: P2PStats, guard: InboundGuard,
                 clock: Clock) -> None:
        self.config = config
        self.clock = clock  # the host's: connected_since is its wall() (shown to people)
        self.stats = stats
        self.guard = guard
        self.peers: dict[str, ConnectedPeer] = {}
        self._conn_count: dict[str, int] = {}
        self._sinks: list[trio.MemorySendChannel[PeerEvent]] = []
        self.closing = False

    def events(self) -> trio.MemoryReceiveChannel[PeerEvent]:
        """A new channel of connect/disconnect events from now on (one per listener).

        If the listener falls ``peer_event_queue_size`` events behind, further events are
        dropped and counted in ``stats.peer_events_dropped``. Closed when the host stops.
        """
        send, receive = trio.open_memory_channel[PeerEvent](self.config.peer_event_queue_size)
        self._sinks.append(send)
        return receive

    def opened(self, conn: INetConn) -> str | None:
        """A connection opened: the peer id when it is the peer's first (now connected)."""
        peer = conn.muxed_conn.peer_id.to_base58()
        self.stats.connections_opened += 1
        count = self._conn_count.get(peer, 0) + 1
        self._conn_count[peer] = count
        if count > 1 or self.closing:
            return None
        address = remote_address(conn)
        direction = connection_direction(conn)
        self.guard.opened(peer, address, direction == "inbound")
        self.peers[peer] = ConnectedPeer(
            peer_id=peer, address=address, direction=direction, connected_since=self.clock.wall()
        )
        logger.info("connected to %s (%s, %s)", peer, direction, address)
        fan_out(self._sinks, PeerEvent("connected", peer, address=address, direction=direction),
                self.stats, "peer_events_dropped")
        return peer

    def closed(self, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id.to_base58()
        self.stats.connections_closed += 1
        count = self._conn_count.get(peer, 0) - 1
        if count > 0:
            self._conn_count[peer] = count
            return
        self.gone(peer)

    def gone(self, peer: str) -> None:
        """Every connection to ``peer`` is closed (also when libp2p never said so: a polite
        close cut short leaves it without a notification)."""
        self._conn_count.pop(peer, None)
        self.guard.closed(peer)
        if self.peers.pop(peer, None) is None:
            return
        logger.info("disconnected from %s", peer)
        fan_out(self._sinks, PeerEvent("disconnected", peer), self.stats, "peer_events_dropped")

    def close(self) -> None:
        self.closing = True
        for sink in self._sinks:
            sink.close()
        self._sinks.clear()
