"""Recon (CIP-124) range-based set reconciliation, sans-IO."""

from __future__ import annotations

from sync.recon.buckets import BucketSummary
from sync.recon.eventid import (
    EventId,
    channel_bounds,
    event_cid,
    event_key,
    genesis_cid,
    network_bounds,
    parse_event_id,
    prefix_successor,
    sender_bounds,
)
from sync.recon.interests import Interests, intersect, normalize
from sync.recon.pair import PairResult, reconcile_in_memory, shuttle
from sync.recon.peers import PeerScheduler, PeerSyncState, node_interests
from sync.recon.reads import (
    KeyReader,
    KeyReads,
    KeysRead,
    ReadKeys,
    answered,
    carry_out_reads,
    insert_keys,
    read_keys,
)
from sync.recon.session import (
    PROTOCOL_ID,
    Incoming,
    MissingKeys,
    PeerMissingKeys,
    ReconConfig,
    ReconEvent,
    ReconFinished,
    ReconSession,
)
from sync.recon.sha256a import LANES, MASK32, Sha256a, lanes_of, wide_of
from sync.recon.store import KeyStore, MemoryKeyStore
from sync.recon.summary import SummaryKeyStore
from sync.recon.summary_codec import SavedBuckets, decode_summary, encode_summary

__all__ = [
    "LANES",
    "MASK32",
    "PROTOCOL_ID",
    "BucketSummary",
    "EventId",
    "Incoming",
    "Interests",
    "KeyReader",
    "KeyReads",
    "KeyStore",
    "KeysRead",
    "MemoryKeyStore",
    "MissingKeys",
    "PairResult",
    "PeerMissingKeys",
    "PeerScheduler",
    "PeerSyncState",
    "ReadKeys",
    "ReconConfig",
    "ReconEvent",
    "ReconFinished",
    "ReconSession",
    "SavedBuckets",
    "Sha256a",
    "SummaryKeyStore",
    "answered",
    "carry_out_reads",
    "channel_bounds",
    "decode_summary",
    "encode_summary",
    "event_cid",
    "event_key",
    "genesis_cid",
    "insert_keys",
    "intersect",
    "lanes_of",
    "network_bounds",
    "node_interests",
    "normalize",
    "parse_event_id",
    "prefix_successor",
    "read_keys",
    "reconcile_in_memory",
    "sender_bounds",
    "shuttle",
    "wide_of",
]
