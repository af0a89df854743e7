"""Replication of the event log between peers: SDS channels over GossipSub, fetch by id,
Recon catch-up, peer dialing and discovery, and the glue from deliveries to stored events.
"""

from __future__ import annotations

from node.replication.channels import (
    ChannelService,
    UnknownChannel,
    topic_of,
)
from node.replication.discovery import (
    DhtDiscovery,
    channel_rendezvous,
    network_rendezvous,
)
from node.replication.events import (
    record_of_delivered,
    record_of_event,
)
from node.replication.fetch import (
    FETCH_PROTOCOL,
    MAX_IDS,
    Fetcher,
)
from node.replication.linger import (
    Linger,
)
from node.replication.peers import (
    KnownPeer,
    PeerManager,
    peer_id_of_addr,
)
from node.replication.recon import (
    RECON_PROTOCOL,
    ReconService,
)
from node.replication.recon_transfer import (
    SessionStats,
    Transfer,
    TransferAbort,
    verify_in_threads,
)

__all__ = [
    "FETCH_PROTOCOL",
    "MAX_IDS",
    "RECON_PROTOCOL",
    "ChannelService",
    "DhtDiscovery",
    "Fetcher",
    "KnownPeer",
    "Linger",
    "PeerManager",
    "ReconService",
    "SessionStats",
    "Transfer",
    "TransferAbort",
    "UnknownChannel",
    "channel_rendezvous",
    "network_rendezvous",
    "peer_id_of_addr",
    "record_of_delivered",
    "record_of_event",
    "topic_of",
    "verify_in_threads",
]
