"""The libp2p layer: the hardened host (Noise, Yamux, GossipSub, framed streams), its
configuration and counters, address checks, DHT discovery, the node key and peer standing.
"""

from __future__ import annotations

from node.p2p.addrs import (
    DNS_PROTOCOLS,
    bind_problem,
    probe,
    resolve_dns,
    unbindable_listen_addr,
)
from node.p2p.compat import (
    SUPPORTED_LIBP2P_VERSION,
    check_libp2p_version,
    set_libp2p_log_level,
)
from node.p2p.dht import (
    Discovery,
    rendezvous_key,
)
from node.p2p.frames import (
    DialError,
    FramedStream,
    FrameError,
    P2PError,
    P2PTimeoutError,
    PeerRefusedError,
    StreamClosedError,
    StreamOpenError,
    encode_frame,
)
from node.p2p.gossip import (
    GossipTopics,
)
from node.p2p.host import (
    P2PHost,
)
from node.p2p.identity import (
    KEY_FILE,
    IdentityError,
    load_identity,
    load_or_create_identity,
)
from node.p2p.run import (
    open_host,
)
from node.p2p.setup import (
    ConnectionNotifee,
    build_host,
    build_pubsub,
    close_host,
    connection_direction,
    key_pair_from,
    remote_address,
    stop_auto_connector,
)
from node.p2p.standing import (
    PeerStanding,
    score_config,
)
from node.p2p.streams import (
    StreamHandler,
    Streams,
)
from node.p2p.types import (
    BanList,
    ConnectedPeer,
    GossipMessage,
    P2PConfig,
    P2PStats,
    PeerEvent,
)

__all__ = [
    "DNS_PROTOCOLS",
    "KEY_FILE",
    "SUPPORTED_LIBP2P_VERSION",
    "BanList",
    "ConnectedPeer",
    "ConnectionNotifee",
    "DialError",
    "Discovery",
    "FrameError",
    "FramedStream",
    "GossipMessage",
    "GossipTopics",
    "IdentityError",
    "P2PConfig",
    "P2PError",
    "P2PHost",
    "P2PStats",
    "P2PTimeoutError",
    "PeerEvent",
    "PeerRefusedError",
    "PeerStanding",
    "StreamClosedError",
    "StreamHandler",
    "StreamOpenError",
    "Streams",
    "bind_problem",
    "build_host",
    "build_pubsub",
    "check_libp2p_version",
    "close_host",
    "connection_direction",
    "encode_frame",
    "key_pair_from",
    "load_identity",
    "load_or_create_identity",
    "open_host",
    "probe",
    "remote_address",
    "rendezvous_key",
    "resolve_dns",
    "score_config",
    "set_libp2p_log_level",
    "stop_auto_connector",
    "unbindable_listen_addr",
]
