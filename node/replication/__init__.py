"""Replication of the event log between peers: SDS channels over GossipSub, fetch by id,
Recon catch-up, peer dialing and discovery (stored records are built by ``sync.stored_event``).
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
from node.replication.fetch import (
    FETCH_PROTOCOL,
    MAX_IDS,
    Fetcher,
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
)
from node.replication.verify import verify_in_threads

__all__ = [
    "FETCH_PROTOCOL",
    "MAX_IDS",
    "RECON_PROTOCOL",
    "ChannelService",
    "DhtDiscovery",
    "Fetcher",
    "KnownPeer",
    "PeerManager",
    "ReconService",
    "SessionStats",
    "Transfer",
    "UnknownChannel",
    "channel_rendezvous",
    "network_rendezvous",
    "peer_id_of_addr",
    "topic_of",
    "verify_in_threads",
]
