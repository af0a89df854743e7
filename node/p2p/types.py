"""Plain data of the p2p layer: configuration, counters, events. No libp2p in here."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

from node.clock import Clock
from sync.membership import ConnLimits
from sync.reachability import ReachabilityConfig

__all__ = [
    "BanList",
    "ConnectedPeer",
    "GossipMessage",
    "P2PConfig",
    "P2PStats",
    "PeerEvent",
]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class P2PConfig:
    """Settings of one host. Timeouts are seconds; ``None`` disables a read/write timeout."""

    listen_addrs: Sequence[str] = ("/ip4/127.0.0.1/tcp/0",)
    # Closed group: only these peer ids may connect (both directions); None = anyone.
    allowed_peers: frozenset[str] | None = None
    dial_timeout: float = 10.0
    stream_open_timeout: float = 10.0
    read_timeout: float | None = 30.0
    write_timeout: float | None = 30.0
    max_frame_bytes: int = 4 * _MIB
    # GossipSub
    gossip_heartbeat_interval: float = 1.0
    gossip_degree: int = 6
    gossip_degree_low: int = 4
    gossip_degree_high: int = 12
    gossip_peer_queue_size: int = 8192  # outbound RPCs queued per peer before libp2p drops
    gossip_queue_size: int = 100_000  # our per-subscriber queue; overflow is counted
    # ... and the bytes it may hold: a peer flooding 1 MB messages faster than we consume them
    # would otherwise make us hold up to gossip_queue_size of them.
    gossip_queue_bytes: int = 64 * _MIB
    gossip_seen_ttl: int = 600  # seconds a message id stays in the duplicate filter
    gossip_max_message_bytes: int = 1_000_000  # libp2p's RPC limit is 1 MiB incl. overhead
    deliver_own_messages: bool = False
    # libp2p signs every gossip message and verifies it at every hop. An application whose
    # payloads carry their own signatures (SDS does) can turn that off to halve crypto costs;
    # from_peer is then unauthenticated.
    gossip_strict_signing: bool = True
    # GossipSub 1.2 with IDONTWANT sent on receipt, before validation, on the next RPC queued
    # for each peer (compat entry G6); off: the router offers 1.1.0 and 1.0.0 only.
    gossip_idontwant: bool = False
    peer_event_queue_size: int = 1024
    # Measure round-trip latency with libp2p ping right after each new connection.
    ping_on_connect: bool = True
    # libp2p logs expected network churn (a peer died, a stranger was refused) at ERROR, and a
    # hostile peer can make it do so at will; we log what matters under "node.p2p".
    libp2p_log_level: str = "CRITICAL"
    # Kademlia DHT discovery (provider records under rendezvous strings); off by default.
    enable_dht: bool = False
    dht_server_mode: bool = True  # also store records for others (False: query only)
    dht_timeout: float = 30.0
    # Connection manager limits (inbound admission, idle close); None: the defaults.
    conn_limits: ConnLimits | None = None
    # Test-only: drop this fraction of received gossip messages before delivery.
    drop_incoming_gossip_fraction: float = 0.0
    drop_seed: int = 0
    # Relay client/service, dial-back and hole punching (node.p2p.relay); None: none of them.
    reachability: ReachabilityConfig | None = None

    def __post_init__(self) -> None:
        if isinstance(self.listen_addrs, str):
            raise ValueError("listen_addrs: expected a list of multiaddrs, got one string")
        object.__setattr__(self, "listen_addrs", tuple(self.listen_addrs))
        if not self.listen_addrs:
            raise ValueError("listen_addrs: at least one address is required")
        if self.allowed_peers is not None:
            object.__setattr__(self, "allowed_peers", frozenset(self.allowed_peers))
        for name in (
            "dial_timeout",
            "stream_open_timeout",
            "gossip_heartbeat_interval",
            "dht_timeout",
        ):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name}: must be a positive number of seconds, got {value!r}")
        for name in ("read_timeout", "write_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}: must be positive or None, got {value!r}")
        for name in (
            "max_frame_bytes",
            "gossip_peer_queue_size",
            "gossip_queue_size",
            "gossip_queue_bytes",
            "gossip_seen_ttl",
            "gossip_max_message_bytes",
            "peer_event_queue_size",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)!r}")
        if not 0 < self.gossip_degree_low <= self.gossip_degree <= self.gossip_degree_high:
            raise ValueError("gossip_degree: need 0 < gossip_degree_low <= degree <= high")
        if not 0.0 <= self.drop_incoming_gossip_fraction <= 1.0:
            raise ValueError("drop_incoming_gossip_fraction: must be in [0, 1]")
        if not isinstance(logging.getLevelName(self.libp2p_log_level.upper()), int):
            raise ValueError(f"libp2p_log_level: unknown level {self.libp2p_log_level!r}")


@dataclass
class P2PStats:
    """Counters of one host; they only grow. Read them, or ``snapshot()`` for a copy."""

    connections_opened: int = 0
    connections_closed: int = 0
    connections_unnoticed: int = 0  # found closed although libp2p never said so (peer_table)
    refused_connections: int = 0  # peers outside allowed_peers, inbound and outbound
    refused_banned: int = 0  # connections and inbound streams of peers banned for misbehaviour
    dial_failures: int = 0
    streams_opened: int = 0  # outbound, successfully negotiated
    streams_accepted: int = 0  # inbound, handed to a handler
    stream_open_failures: int = 0
    frame_errors: int = 0  # garbage, oversized or truncated frames received
    timeouts: int = 0  # read/write timeouts on framed streams
    handler_errors: int = 0  # exceptions that escaped a stream handler
    gossip_published: int = 0
    gossip_received: int = 0  # delivered to our subscription queues
    gossip_copies_received: int = 0  # messages read from peers, duplicates included
    gossip_duplicates_received: int = 0  # of them, copies of a message already seen
    gossip_idontwant_sent: int = 0  # message ids sent in IDONTWANT (gossip_idontwant only)
    gossip_idontwant_rpcs: int = 0  # RPCs started for them: no RPC to that peer was queued
    gossip_dropped_test: int = 0  # dropped by drop_incoming_gossip_fraction
    gossip_dropped_overflow: int = 0  # a subscriber's queue was full
    gossip_refused_foreign: int = 0  # originated outside allowed_peers (relayed by someone)
    peer_events_dropped: int = 0  # a peer-event listener's queue was full
    yamux_window_overruns: int = 0  # connections ended: the peer wrote past a stream's window

    def snapshot(self) -> P2PStats:
        return P2PStats(**{f.name: getattr(self, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class GossipMessage:
    """One message received on a subscribed topic."""

    topic: str
    from_peer: str  # the original publisher (signed), not the neighbour that relayed it
    data: bytes
    seqno: int
    # The neighbour that handed it to us, when known. Only a message that came straight from
    # its publisher (forwarder == from_peer) may count against that peer's standing: the
    # from field is not authenticated, and honest peers relay others' messages unchecked.
    forwarder: str | None = None
    # When it was read off the neighbour's stream (the host clock's wall time), before it
    # waited in the subscriber's queue: what a budget per neighbour is charged by.
    received_at: float | None = None


@dataclass(frozen=True)
class PeerEvent:
    """A peer became connected (first connection) or disconnected (last one closed)."""

    kind: Literal["connected", "disconnected"]
    peer_id: str
    address: str | None = None
    direction: str | None = None  # "inbound" / "outbound" for connected events


@dataclass(frozen=True)
class ConnectedPeer:
    """What we know about a currently connected peer."""

    peer_id: str
    address: str | None  # remote multiaddr of the connection
    direction: str  # "inbound", "outbound" or "unknown"
    connected_since: float  # Unix seconds (the host clock's wall()) when it came up
    latency_s: float | None = None  # last ping round trip, if measured


class BanList:
    """Peers refused until an instant of ``clock.now()``: connections both ways and streams.

    Bounded: when full, expired entries go first, then the ban ending soonest.
    """

    def __init__(self, max_entries: int = 10_000, *, clock: Clock) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._until: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._until)

    def ban(self, peer_id: str, until: float) -> None:
        if peer_id not in self._until and len(self._until) >= self.max_entries:
            now = self.clock.now()
            self._until = {p: u for p, u in self._until.items() if u > now}
            if len(self._until) >= self.max_entries:
                del self._until[min(self._until, key=self._until.__getitem__)]
        self._until[peer_id] = max(until, self._until.get(peer_id, 0.0))

    def is_banned(self, peer_id: str) -> bool:
        until = self._until.get(peer_id)
        if until is None:
            return False
        if until <= self.clock.now():
            del self._until[peer_id]
            return False
        return True

    def active(self) -> int:
        now = self.clock.now()
        return sum(1 for u in self._until.values() if u > now)
