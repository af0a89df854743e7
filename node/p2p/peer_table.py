"""Who is connected, from libp2p's connection notifications.

One entry per peer however many connections it has (a relayed one and its direct upgrade, a
verify probe beside the connection): the first connection makes the peer connected, the last
one closing makes it gone, and each of those two moments is fanned out as a
:class:`~node.p2p.types.PeerEvent` to every listener (membership, Recon, known peers).

The table holds the connections themselves, not a count of notices: libp2p 0.8.1 sends a
"disconnected" notice for a duplicate wrapper it never announced, and none for a connection
whose close was cut short (its notice comes after a sleep that a cancellation can end). A count
then drifted and held a peer "connected" for good after its last connection closed (``peers
forget`` could not disconnect it). A connection that says it is closed counts as gone whether
or not its notice came (``stats.connections_unnoticed``).
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
        self._conns: dict[str, set[INetConn]] = {}
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
        if conn.is_closed:  # closed before its "connected" notice ran (notices are tasks)
            return None
        if not self._live(peer) and peer in self.peers:
            self.gone(peer)  # its connections all closed unnoticed: say so before the new one
        conns = self._conns.setdefault(peer, set())
        conns.add(conn)
        if len(conns) > 1 or self.closing:
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
        conns = self._conns.get(peer)
        if conns is None:  # a wrapper never announced, or the peer is gone already
            return
        conns.discard(conn)
        if not self._live(peer):
            self.gone(peer)

    def sweep(self, peer: str | None = None) -> None:
        """Let go of ``peer`` (None: every peer) if all its connections closed unnoticed."""
        for each in [peer] if peer is not None else list(self._conns):
            if each in self._conns and not self._live(each):
                self.gone(each)

    def _live(self, peer: str) -> set[INetConn]:
        """``peer``'s open connections, forgetting those closed without a notice."""
        conns = self._conns.get(peer, set())
        stale = {conn for conn in conns if conn.is_closed}
        if stale:
            conns -= stale
            self.stats.connections_unnoticed += len(stale)
            logger.info("%d connection(s) to %s closed without libp2p's notice", len(stale),
                        peer)
        return conns

    def gone(self, peer: str) -> None:
        """Every connection to ``peer`` is closed (also when libp2p never said so: a polite
        close cut short leaves it without a notification)."""
        self._conns.pop(peer, None)
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
