"""SDS (Scalable Data Sync) and SDS-R (repair), sans-IO: see docs/sds.md."""

from __future__ import annotations

from sync.sds.bloom import BloomParams, BloomView, RollingBloomFilter, bloom_indices
from sync.sds.channel import LAMPORT_LIMIT, SdsChannel
from sync.sds.config import LostPolicy, SdsConfig
from sync.sds.delivered import DeliveredIndex, DeliveredRead, ReadDelivered
from sync.sds.events import (
    Acknowledged,
    Delivered,
    DependencyLost,
    EphemeralReceived,
    Evicted,
    MissingDependencies,
    MissingEntry,
    PossiblyAcknowledged,
    RepairAnswered,
    RepairRefused,
    RepairRequested,
    ResendExhausted,
    SdsEvent,
)
from sync.sds.members import MemberEstimate, response_groups
from sync.sds.message import (
    DEFAULT_MAX_SIZE,
    SIGNATURE_DOMAIN,
    DecodeLimits,
    HistoryRef,
    SignedEvent,
    Transmission,
    decode_event,
    decode_transmission,
    encode_event,
    event_digest,
    message_id_of,
    transmission_suffix,
)
from sync.sds.persist import state_reads
from sync.sds.profile import (
    PROFILES,
    SdsProfile,
    decode_event_by_channel,
    decode_event_in,
    peek_event,
    profile_of,
)
from sync.sds.repair import in_response_group, repair_hash, t_req, t_resp
from sync.sds.state import ChannelState, LogEntry, decode_state, encode_state

__all__ = [
    "DEFAULT_MAX_SIZE",
    "LAMPORT_LIMIT",
    "PROFILES",
    "SIGNATURE_DOMAIN",
    "Acknowledged",
    "BloomParams",
    "BloomView",
    "ChannelState",
    "DecodeLimits",
    "Delivered",
    "DeliveredIndex",
    "DeliveredRead",
    "DependencyLost",
    "EphemeralReceived",
    "Evicted",
    "HistoryRef",
    "LogEntry",
    "LostPolicy",
    "MemberEstimate",
    "MissingDependencies",
    "MissingEntry",
    "PossiblyAcknowledged",
    "ReadDelivered",
    "RepairAnswered",
    "RepairRefused",
    "RepairRequested",
    "ResendExhausted",
    "RollingBloomFilter",
    "SdsChannel",
    "SdsConfig",
    "SdsEvent",
    "SdsProfile",
    "SignedEvent",
    "Transmission",
    "bloom_indices",
    "decode_event",
    "decode_event_by_channel",
    "decode_event_in",
    "decode_state",
    "decode_transmission",
    "encode_event",
    "encode_state",
    "event_digest",
    "in_response_group",
    "message_id_of",
    "peek_event",
    "profile_of",
    "repair_hash",
    "response_groups",
    "state_reads",
    "t_req",
    "t_resp",
    "transmission_suffix",
]
