"""Configuration of an SDS channel: every tunable of SDS and SDS-R in one frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sync.errors import LocalProtocolError

__all__ = ["LostPolicy", "SdsConfig"]

LostPolicy = Literal["deliver", "drop"]


@dataclass(frozen=True)
class SdsConfig:
    """Settings of one channel. Times are float seconds.

    The SDS-R values ``t_min``, ``t_max`` and ``num_response_groups`` SHOULD be equal for every
    participant of a channel (spec, "SDS-R global state").
    """

    #: Entries in the causal history of a content message (spec recommends 2).
    causal_history_size: int = 2
    #: Entries in the causal history of a sync message: all DAG heads up to this many.
    sync_history_size: int = 16
    #: The bloom filter covers exactly the most recent ``bloom_capacity`` received ids ...
    bloom_capacity: int = 1000
    #: ... with at most this false-positive rate; m and k are derived optimally from both.
    bloom_fp_rate: float = 0.01
    #: Our transmissions carry a filter of only the ids no history named yet, sized for their
    #: number, while there are at most this many (``sync.sds.ackfilter``; capped at
    #: ``bloom_capacity``); 0 (the default for now, docs/sds.md section 3): always the full
    #: filter of ``bloom_capacity`` ids.
    bloom_small_max: int = 0
    #: The same for the syncs we send only because repair requests fell due (docs/sds.md
    #: section 4): their job is the requests, and at scale they are most of what members
    #: send after a loss; the full filter was ~1.2 KB of their ~2 KB.
    bloom_small_max_request_sync: int = 256
    #: Promote "possibly acknowledged" to "acknowledged" once the probability that every bloom
    #: hit (from distinct participants) was a false positive falls below this bound.
    ack_fp_bound: float = 1e-6
    #: ... and at least this many distinct participants' signed filters name it (the spec asks
    #: for "multiple"; one member lying about its receipts must not stop our resends).
    ack_min_filters: int = 2
    #: Resend an unacknowledged message after this long ...
    resend_interval: float = 10.0
    #: ... and a possibly acknowledged one after this long.
    possibly_acked_resend_interval: float = 30.0
    #: Give up (``ResendExhausted``) after this many resends.
    max_resends: int = 5
    #: A missing dependency is irretrievably lost this long after it was first seen missing.
    lost_timeout: float = 300.0
    #: What to do with messages waiting on a lost dependency.
    lost_policy: LostPolicy = "deliver"
    #: Mean quiet period before a sync message; the back-off adds up to ``sync_jitter`` more.
    sync_interval: float = 30.0
    sync_jitter: float = 30.0
    #: The jitter grows with the group: ``sync_jitter`` times the response groups G
    #: (``N div response_group_size + 1``), so that the group's periodic syncs, which the
    #: first one sent suppresses, stay about as frequent as in a small group (docs/sds.md).
    sync_jitter_scaled: bool = True
    #: SDS-R: repair window (spec recommends T_min >= 30 s, T_max 120-600 s).
    t_min: float = 30.0
    t_max: float = 120.0
    #: SDS-R: a request that falls due waits this long times the response groups G (at most
    #: ``t_min``) for the next message we send, so that requests falling due close together
    #: share one message (up to ``max_repair_requests``), then goes on a sync of its own
    #: (docs/sds.md section 4).
    repair_linger: float = 15.0
    #: SDS-R response groups G. 0 (default): the spec's ``N div response_group_size + 1``
    #: from the channel's member estimate (``sync.sds.members``); >= 1: fixed.
    num_response_groups: int = 0
    response_group_size: int = 128
    #: Member estimate: distinct signed senders heard within ``member_window`` seconds (at
    #: most ``max_members_tracked`` of them), or the node's own estimate if larger.
    member_window: float = 600.0
    max_members_tracked: int = 100_000
    #: DAG heads (docs/sds.md "Heads"): at most ``max_heads``, the oldest dropped; a head
    #: whose Lamport time is older than ``head_ttl`` seconds expires.
    max_heads: int = 64
    head_ttl: float = 300.0
    #: SDS-R answers (docs/security.md "Repair"): one message is rebroadcast at most once per
    #: ``repair_cooldown`` seconds (capped at ``t_min``: an honest member asks again no sooner
    #: than ``t_min`` after its last request, and must be answered); within each
    #: ``repair_window`` a requester's requests may cost at most ``repair_requester_bytes``
    #: and all requests ``repair_total_bytes`` of rebroadcast wires. Requesters tracked: at
    #: most ``max_repair_requesters``.
    repair_cooldown: float = 30.0
    repair_window: float = 120.0
    repair_requester_bytes: int = 1 << 20
    repair_total_bytes: int = 16 << 20
    max_repair_requesters: int = 10_000
    #: SDS-R: at most this many entries in one ``repair_request`` (spec recommends 3).
    max_repair_requests: int = 3
    #: SDS-R: full messages kept for rebroadcast (the most recent ones).
    repair_cache_size: int = 10_000
    #: Decoder limits: a bigger or more complex message is a protocol error.
    max_message_size: int = 1 << 20
    max_history_entries: int = 64
    max_repair_entries: int = 32
    max_id_length: int = 256
    max_hint_length: int = 1024
    #: Check that message_id is the digest of the message (off only to interoperate with
    #: implementations that derive ids differently; then signatures cannot be checked either).
    check_message_ids: bool = True
    #: Ids remembered to drop duplicate ephemeral messages.
    ephemeral_dedup_size: int = 4096
    #: Wire profile (``sync.sds.profile``): "syncnode" (signed, our ids and filters) or "waku"
    #: (@waku/sds 0.0.8's wire: unsigned, payload-hash ids, its fixed filter).
    profile: str = "syncnode"
    #: A received Lamport timestamp may run at most this far (ms) ahead of the receiver's wall
    #: clock (``sync.sds.clock``): the bound on how long a far-future event can stay "newest".
    max_lamport_ahead_ms: int = 600_000
    #: Bounds of the incoming (waiting) buffer, per channel and per sender, in messages and
    #: bytes (wire + content): what a peer sending messages with missing dependencies can
    #: make us hold.
    max_waiting: int = 10_000
    max_waiting_bytes: int = 64 << 20
    max_waiting_per_sender: int = 1_000
    max_waiting_bytes_per_sender: int = 16 << 20
    #: Of the waiting buffer, at most this many bytes of wires (the newest) go into the saved
    #: channel state.
    waiting_state_bytes: int = 8 << 20
    #: Our unacknowledged messages held for resending, in wire bytes (``sync.sds.outgoing``:
    #: beyond, the oldest is no longer resent; it stays in the log).
    max_outgoing_bytes: int = 64 << 20
    #: Resends per second, in bytes sent (wire and suffix; one message larger than this still
    #: goes alone): ~590 small events a second, under our gossip pace (800 items/s), so that
    #: a burst's resends are not queued at once (``sync.sds.outgoing``).
    resend_bytes_per_s: int = 1 << 20
    #: Bounds of the missing set (ids named by messages but not received), per channel and
    #: per sender of the naming message.
    max_missing: int = 10_000
    max_missing_per_sender: int = 1_000
    #: SDS-R: the repair cache also holds at most this many bytes of wires.
    repair_cache_bytes: int = 64 << 20
    #: Delivered ids kept in memory (the newest deliveries) when the channel's driver answers
    #: for older ones (``SdsChannel(bounded=True)``); unbounded, the whole log is kept.
    delivered_window: int = 10_000

    def __post_init__(self) -> None:
        checks = [
            ("causal_history_size", self.causal_history_size >= 0),
            ("sync_history_size", self.sync_history_size >= self.causal_history_size),
            ("bloom_capacity", self.bloom_capacity > 0),
            ("bloom_fp_rate", 0.0 < self.bloom_fp_rate < 1.0),
            ("bloom_small_max", self.bloom_small_max >= 0),
            ("bloom_small_max_request_sync", self.bloom_small_max_request_sync >= 0),
            ("ack_fp_bound", 0.0 < self.ack_fp_bound < 1.0),
            ("ack_min_filters", self.ack_min_filters >= 1),
            ("resend_interval", self.resend_interval > 0),
            ("possibly_acked_resend_interval", self.possibly_acked_resend_interval > 0),
            ("max_resends", self.max_resends >= 0),
            ("lost_timeout", self.lost_timeout > 0),
            ("lost_policy", self.lost_policy in ("deliver", "drop")),
            ("sync_interval", self.sync_interval > 0),
            ("sync_jitter", self.sync_jitter >= 0),
            ("t_min", self.t_min >= 0),
            ("t_max", self.t_max > self.t_min),
            ("repair_linger", self.repair_linger >= 0),
            ("num_response_groups", self.num_response_groups >= 0),
            ("response_group_size", self.response_group_size >= 1),
            ("member_window", self.member_window > 0),
            ("max_members_tracked", self.max_members_tracked >= 1),
            ("max_heads", self.max_heads >= 1),
            ("head_ttl", self.head_ttl > 0),
            ("repair_cooldown", self.repair_cooldown >= 0),
            ("repair_window", self.repair_window > 0),
            ("repair_requester_bytes", self.repair_requester_bytes >= 0),
            ("repair_total_bytes", self.repair_total_bytes >= self.repair_requester_bytes),
            ("max_repair_requesters", self.max_repair_requesters >= 1),
            ("max_repair_requests", self.max_repair_requests >= 0),
            ("repair_cache_size", self.repair_cache_size >= 0),
            ("max_message_size", self.max_message_size > 0),
            ("max_history_entries", self.max_history_entries >= self.sync_history_size),
            ("max_repair_entries", self.max_repair_entries >= self.max_repair_requests),
            ("profile", self.profile in ("syncnode", "waku")),
            ("max_lamport_ahead_ms", 0 <= self.max_lamport_ahead_ms <= 1 << 40),
            ("max_waiting", self.max_waiting >= 1),
            ("max_waiting_bytes", self.max_waiting_bytes >= 2 * self.max_message_size),
            ("max_waiting_per_sender", 1 <= self.max_waiting_per_sender <= self.max_waiting),
            ("max_waiting_bytes_per_sender",
             2 * self.max_message_size <= self.max_waiting_bytes_per_sender
             <= self.max_waiting_bytes),
            ("max_missing", self.max_missing >= 1),
            ("max_missing_per_sender", 1 <= self.max_missing_per_sender <= self.max_missing),
            ("repair_cache_bytes", self.repair_cache_bytes >= 0),
            ("waiting_state_bytes", self.waiting_state_bytes >= 0),
            ("max_outgoing_bytes", self.max_outgoing_bytes > 0),
            ("resend_bytes_per_s", self.resend_bytes_per_s > 0),
            ("delivered_window", self.delivered_window >= max(self.bloom_capacity,
                                                              4 * self.sync_history_size, 64)),
        ]
        for name, ok in checks:
            if not ok:
                raise LocalProtocolError(f"invalid SdsConfig.{name}")
