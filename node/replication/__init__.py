"""Replication of the event log between peers: SDS channels over GossipSub, fetch by id,
Recon catch-up, peer dialing and discovery (stored records are built by ``sync.stored_event``).
"""

from __future__ import annotations

from node.replication.channel_metrics import (
    CHANNEL_METRICS,
    describe_channel_metrics,
)
from node.replication.channel_state import (
    ChannelMaker,
)
from node.replication.channels import (
    ChannelService,
    UnknownChannel,
)
from node.replication.clock import Clock, SystemClock, TrioWallClock
from node.replication.delivered_reads import DeliveredReads
from node.replication.discovery import (
    DhtDiscovery,
    channel_rendezvous,
    network_rendezvous,
)
from node.replication.driver import ReplicationDriver
from node.replication.fetch import (
    FETCH_PROTOCOL,
    MAX_IDS,
    Fetcher,
)
from node.replication.gossip_outbox import (
    GossipOutbox,
    topic_of,
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
from node.replication.recon_metrics import (
    RECON_METRICS,
    describe_recon_metrics,
)
from node.replication.recon_phase import (
    reconcile,
)
from node.replication.recon_serve import (
    serve_wants,
)
from node.replication.recon_summary import (
    SUMMARY_METRICS,
    SummarySaver,
    keystore_limits,
    open_keys,
)
from node.replication.recon_transfer import (
    SessionStats,
    Transfer,
)
from node.replication.verify import PendingBatch, verify_batch, verify_in_threads

__all__ = [
    "CHANNEL_METRICS",
    "FETCH_PROTOCOL",
    "MAX_IDS",
    "RECON_METRICS",
    "RECON_PROTOCOL",
    "SUMMARY_METRICS",
    "ChannelMaker",
    "ChannelService",
    "Clock",
    "DeliveredReads",
    "DhtDiscovery",
    "Fetcher",
    "GossipOutbox",
    "KnownPeer",
    "PeerManager",
    "PendingBatch",
    "ReconService",
    "ReplicationDriver",
    "SessionStats",
    "SummarySaver",
    "SystemClock",
    "Transfer",
    "TrioWallClock",
    "UnknownChannel",
    "channel_rendezvous",
    "describe_channel_metrics",
    "describe_recon_metrics",
    "keystore_limits",
    "network_rendezvous",
    "open_keys",
    "peer_id_of_addr",
    "reconcile",
    "serve_wants",
    "topic_of",
    "verify_batch",
    "verify_in_threads",
]
