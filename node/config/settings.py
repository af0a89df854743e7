"""Configuration: a TOML file, then ``SYNCNODE_<SECTION>_<KEY>`` variables, then CLI flags.

Every key is declared once, here (the applications' sections in ``node.config.apps``), with its
type, default and check (``node.config.fields.opt``); ``config.example.toml`` shows
them all. Anything wrong is a ``ConfigError`` naming the key, which the CLI prints on one line
before exiting with status 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.config.apps import BlocksSection, DbSection, SparkSection
from node.config.checks import (
    check_database_url,
    check_dir,
    check_listen_multiaddrs,
    check_peer_ids,
    check_peer_multiaddrs,
)
from node.config.fields import (
    DAY,
    GIB,
    HOUR,
    MIB,
    ConfigError,
    at_least,
    channel_names,
    fraction,
    host_names,
    host_port,
    is_loopback_host,
    non_negative,
    one_of,
    opt,
    parse_host_port,
    positive,
    shown,
)
from node.config.load import ENV_PREFIX, load
from node.config.membership import MembershipSection
from node.config.net import ReachabilitySection
from sync.recon.eventid import CIP124_DRAFT, LAYOUTS
from sync.replication import FETCH_GRACE_S

__all__ = [
    "ENV_PREFIX",
    "MIN_FRAME_BYTES",
    "ApiConfig",
    "Config",
    "FetchSection",
    "MembershipSection",
    "NodeConfig",
    "P2PSection",
    "PeersSection",
    "ReconSection",
    "SdsSection",
    "StorageConfig",
    "UiSection",
    "load_config",
]

MIN_FRAME_BYTES = 1024 * 1024


@dataclass(frozen=True)
class NodeConfig:
    data_dir: str = opt("./data", lambda v: check_dir(v) if v else "must not be empty")
    network_id: int = opt(1, lambda v: None if 0 <= v < 2**63 else "must be in [0, 2^63)",
                          most=2**63 - 1)
    log_level: str = opt("info", one_of("debug", "info", "warning", "error"))
    log_format: str = opt("text", one_of("text", "json"))
    # Freeze the objects of start-up out of the cycle collector once the node has started: a
    # full collection then walks the node's runtime objects only, not the ~150,000 of its
    # modules and libraries (a ~90 ms stop of every thread; node/telemetry/gc_pauses.py).
    gc_freeze: bool = opt(True)


@dataclass(frozen=True)
class ApiConfig:
    listen: str = opt("127.0.0.1:8700", host_port)
    allow_remote: bool = opt(False)
    hosts: tuple[str, ...] = opt((), host_names)
    max_body_bytes: int = opt(4 * 1024 * 1024, positive, most=GIB)
    body_timeout_s: float = opt(30.0, positive, most=HOUR)
    page_max_bytes: int = opt(8 * 1024 * 1024, positive, most=GIB)
    idle_timeout_s: float = opt(5.0, positive, most=HOUR)
    max_follows: int = opt(64, positive, most=10_000)
    follow_buffer_bytes: int = opt(256 * 1024, positive, most=GIB)
    idempotency_ttl_s: float = opt(86400.0, positive, most=30 * DAY)
    idempotency_max_keys: int = opt(100_000, positive, most=10_000_000)
    # A batch publish (docs/node.md "Publishing many events"): most events in one request, and
    # most bytes of that request's body (the publish route reads up to the larger of this and
    # max_body_bytes).
    publish_batch_max_events: int = opt(5000, positive, most=1_000_000)
    publish_batch_max_bytes: int = opt(4 * 1024 * 1024, positive, most=GIB)

    def __post_init__(self) -> None:
        # Anyone who can reach the API can publish as this node: exposing it is an explicit act.
        host, _port = parse_host_port(self.listen)
        if not self.allow_remote and not is_loopback_host(host):
            raise ConfigError(
                "api.listen",
                f"{host} is not a loopback address; the API signs and publishes as this node, "
                "so set api.allow_remote = true to expose it (every request then needs the token)",
            )


@dataclass(frozen=True)
class UiSection:
    """The status page at ``GET /`` and its sign-in (docs/ops/README.md, "The status page")."""

    link_ttl_s: float = opt(120.0, positive, most=DAY)
    max_links: int = opt(16, positive, most=10_000)
    session_ttl_s: float = opt(8 * 3600.0, positive, most=30 * DAY)
    max_sessions: int = opt(16, positive, most=10_000)
    requests_per_s: float = opt(10.0, positive, most=100_000)
    burst: int = opt(40, positive, most=1_000_000)
    refresh_s: float = opt(
        2.0, lambda v: None if 0.5 <= v <= 3600 else "must be in 0.5..3600", most=3600
    )


@dataclass(frozen=True)
class StorageConfig:
    url: str = opt("", check_database_url)
    sqlite_synchronous: str = opt("FULL", one_of("NORMAL", "FULL"))
    # Level of commits holding only events relayed or fetched from peers (never stronger
    # than sqlite_synchronous; docs/node.md "Durability contract").
    relayed_synchronous: str = opt("NORMAL", one_of("NORMAL", "FULL"))
    batch_max_events: int = opt(512, positive, most=100_000)
    batch_max_delay_ms: int = opt(5, non_negative, most=60_000)
    # A batch that starts with relayed events (gossip; nobody waits for their commit) waits
    # this long for more (an own publish arriving ends it within batch_max_delay_ms).
    relayed_batch_delay_ms: int = opt(50, non_negative, most=60_000)
    # Page cache (MiB, at most) of the ingest workers' SQLite connections that append fetched
    # events: a catch-up's inserts into the random message_id index re-read each leaf once the
    # index outgrows it (0: SQLite's 2 MiB).
    sqlite_writer_cache_mib: int = opt(32, non_negative, most=4096)


@dataclass(frozen=True)
class P2PSection:
    listen: tuple[str, ...] = opt(("/ip4/127.0.0.1/tcp/4001",), check_listen_multiaddrs)
    bootstrap: tuple[str, ...] = opt((), check_peer_multiaddrs)
    allowed_peers: tuple[str, ...] = opt((), check_peer_ids)
    channels: tuple[str, ...] = opt(("general",), channel_names)
    dial_timeout_s: float = opt(10.0, positive, most=HOUR)
    read_timeout_s: float = opt(30.0, positive, most=HOUR)
    # A frame must hold the largest event with its envelope.
    max_frame_bytes: int = opt(4 * MIB, at_least(MIN_FRAME_BYTES, "1 MiB"), most=256 * MIB)
    dht: bool = opt(False)
    dht_interval_s: float = opt(60.0, positive, most=DAY)
    dht_timeout_s: float = opt(30.0, positive, most=HOUR)
    gossip_linger_ms: int = opt(300, non_negative, most=60_000)
    # GossipSub mesh degree D, D_lo, D_hi (docs/p2p.md "Mesh degree"): each mesh peer sends us a
    # copy of every message. A thinner mesh reads fewer copies, but on py-libp2p 0.8.1 a D_hi
    # below the group size makes peers prune, and a node pruned by all (60-s backoff) gets
    # gossip only by IHAVE/IWANT: measured, so the default stays GossipSub's.
    gossip_degree: int = opt(6, positive, most=64)
    gossip_degree_low: int = opt(4, positive, most=64)
    gossip_degree_high: int = opt(12, positive, most=64)
    # GossipSub 1.2 with IDONTWANT sent on receipt, before validation (docs/p2p.md "Mesh
    # degree"); off: 1.1.0 and 1.0.0, as measured best on py-libp2p 0.8.1.
    gossip_idontwant: bool = opt(False)
    test_drop_incoming_gossip: float = opt(0.0, fraction, most=1.0)
    # -- gossip floods (docs/security.md "Gossip floods") --
    gossip_peer_rate: float = opt(1000.0, positive, most=1e6)
    gossip_peer_burst: float = opt(5000.0, lambda v: None if v >= 1 else "must be >= 1", most=1e7)
    gossip_queue_bytes: int = opt(64 * 1024 * 1024, positive, most=16 * GIB)
    peer_event_queue: int = opt(1024, positive, most=1_000_000)


def _channel_profiles(v: Any) -> str | None:
    for item in v:
        name, sep, profile = str(item).partition("=")
        if not sep or not name or profile not in ("syncnode", "waku"):
            return f"expected CHANNEL=syncnode|waku, got {item!r}"
    return None


@dataclass(frozen=True)
class SdsSection:
    causal_history_size: int = opt(2, positive, most=1024)
    bloom_capacity: int = opt(1000, positive, most=10_000_000)
    bloom_fp_rate: float = opt(0.01, lambda v: None if 0 < v < 1 else "must be in (0, 1)", most=1.0)
    bloom_small_max: int = opt(0, non_negative, most=10_000_000)
    bloom_small_max_request_sync: int = opt(256, non_negative, most=10_000_000)
    resend_interval_s: float = opt(10.0, positive, most=DAY)
    max_resends: int = opt(5, non_negative, most=1000)
    lost_timeout_s: float = opt(300.0, positive, most=30 * DAY)
    sync_interval_s: float = opt(30.0, positive, most=DAY)
    repair_t_min_s: float = opt(30.0, positive, most=DAY)
    repair_t_max_s: float = opt(120.0, positive, most=DAY)
    profile: str = opt("syncnode", one_of("syncnode", "waku"))
    channel_profiles: tuple[str, ...] = opt((), _channel_profiles)
    # -- limits against hostile peers (docs/security.md "Clocks", "SDS buffers") --
    max_lamport_ahead_ms: int = opt(600_000, lambda v: None if 0 <= v <= 1 << 40
                                     else "must be in [0, 2^40]", most=1 << 40)
    max_waiting: int = opt(10_000, positive, most=10_000_000)
    max_waiting_bytes: int = opt(64 << 20, positive, most=16 * GIB)
    max_waiting_per_sender: int = opt(1_000, positive, most=10_000_000)
    max_waiting_bytes_per_sender: int = opt(16 << 20, positive, most=16 * GIB)
    max_missing: int = opt(10_000, positive, most=10_000_000)
    max_missing_per_sender: int = opt(1_000, positive, most=10_000_000)
    repair_cache_bytes: int = opt(64 << 20, non_negative, most=16 * GIB)
    max_outgoing_bytes: int = opt(64 << 20, positive, most=16 * GIB)
    resend_bytes_per_s: int = opt(1 << 20, positive, most=16 * GIB)
    ack_min_filters: int = opt(2, positive, most=1000)
    # -- memory (docs/architecture.md "Memory independent of the log's length"; the default:
    # docs/ops/README.md "Memory") --
    delivered_window: int = opt(10_000, at_least(1000), most=100_000_000)
    # -- large groups (docs/sds.md "Heads", "SDS-R at scale"; docs/security.md "SDS-R") --
    response_groups: int = opt(0, non_negative, most=1_000_000)
    member_window_s: float = opt(600.0, positive, most=DAY)
    member_estimate: int = opt(0, non_negative, most=10_000_000)
    max_heads: int = opt(64, positive, most=100_000)
    head_ttl_s: float = opt(300.0, positive, most=DAY)
    repair_cooldown_s: float = opt(30.0, non_negative, most=DAY)
    repair_window_s: float = opt(120.0, positive, most=DAY)
    repair_requester_bytes: int = opt(1 << 20, non_negative, most=16 * GIB)
    repair_total_bytes: int = opt(16 << 20, non_negative, most=16 * GIB)


@dataclass(frozen=True)
class ReconSection:
    interval_s: float = opt(10.0, positive, most=DAY)
    fanout: int = opt(16, lambda v: None if 2 <= v <= 256 else "must be within 2..256", most=256)
    session_timeout_s: float = opt(60.0, positive, most=DAY)
    fetch_batch: int = opt(500, positive, most=100_000)
    gossip_grace_s: float = opt(3.0, non_negative, most=HOUR)
    event_id_layout: str = opt(CIP124_DRAFT, one_of(*LAYOUTS))
    # Transfer limits (docs/security.md "Recon").
    claim_timeout_s: float = opt(15.0, positive, most=HOUR)
    max_key_list: int = opt(256, at_least(8), most=1_000_000)
    # One Recon message: its bytes, ranges and keys (docs/security.md "Work budgets").
    max_message_bytes: int = opt(4 << 20, lambda v: None if 64 << 10 <= v <= 16 << 20 else
                                 "must be between 64 KiB and 16 MiB", most=16 << 20)
    max_message_ranges: int = opt(262_144, at_least(512), most=1 << 24)
    max_message_keys: int = opt(262_144, at_least(2048), most=1 << 24)
    max_missing_keys: int = opt(100_000, positive, most=100_000_000)
    serve_batch_bytes: int = opt(MIB, at_least(MIB, "1 MiB"), most=256 * MIB)
    max_sessions: int = opt(16, positive, most=10_000)
    # Prompt sessions with one peer (on connecting, on a gap its events show) at most this often.
    prompt_interval_s: float = opt(5.0, positive, most=HOUR)
    # -- key store memory (docs/architecture.md "Recon key store") --
    keystore_bucket_keys: int = opt(256, lambda v: None if 16 <= v <= 65536 else
                                     "must be between 16 and 65536", most=65536)
    keystore_max_buckets: int = opt(32768, at_least(64), most=1 << 24)
    keystore_cache_keys: int = opt(16_384, non_negative, most=1 << 30)  # (docs/ops "Memory")
    # Saved summary: restart without rescanning every key (0: only at clean shutdown).
    summary_save_interval_s: float = opt(60.0, non_negative, most=DAY)
    # Processes verifying fetched events outside the daemon (docs/architecture.md "Ingest").
    ingest_workers: int = opt(2, lambda v: None if 0 <= v <= 64 else "must be in [0, 64]", most=64)
    # The workers also append the events they verified (docs/bench/cluster.md, "the ingest
    # worker as writer"); false: the daemon's store writes them, as before.
    ingest_workers_write: bool = opt(True)


@dataclass(frozen=True)
class FetchSection:
    """Fetch-by-id (docs/security.md "Fetch by id")."""

    max_ids: int = opt(256, positive, most=100_000)
    serve_batch_bytes: int = opt(MIB, at_least(MIB, "1 MiB"), most=256 * MIB)
    max_streams_per_peer: int = opt(2, positive, most=1024)
    max_streams: int = opt(16, positive, most=65536)


@dataclass(frozen=True)
class PeersSection:
    """Peer standing: scores, bans (docs/security.md "Peer scores and bans")."""

    ban_threshold: float = opt(-100.0, lambda v: None if v < 0 else "must be < 0", most=0.0)
    ban_s: float = opt(60.0, positive, most=30 * DAY)
    max_ban_s: float = opt(3600.0, positive, most=365 * DAY)
    score_half_life_s: float = opt(300.0, positive, most=30 * DAY)
    max_tracked: int = opt(10_000, positive, most=10_000_000)
    # Work budgets: Recon, fetch and transfer work per peer and in all (docs/security.md
    # "Work budgets"); units are about one range operation each (sync.workbudget).
    work_rate: float = opt(10_000.0, positive, most=1e9)
    work_burst: float = opt(200_000.0, lambda v: None if v >= 1 else "must be >= 1", most=1e12)
    work_total_rate: float = opt(30_000.0, positive, most=1e9)
    work_total_burst: float = opt(
        400_000.0, lambda v: None if v >= 1 else "must be >= 1", most=1e12
    )
    work_max_wait_s: float = opt(10.0, positive, most=HOUR)


@dataclass(frozen=True)
class Config:
    node: NodeConfig = field(default_factory=NodeConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    ui: UiSection = field(default_factory=UiSection)
    storage: StorageConfig = field(default_factory=StorageConfig)
    p2p: P2PSection = field(default_factory=P2PSection)
    sds: SdsSection = field(default_factory=SdsSection)
    recon: ReconSection = field(default_factory=ReconSection)
    fetch: FetchSection = field(default_factory=FetchSection)
    peers: PeersSection = field(default_factory=PeersSection)
    reachability: ReachabilitySection = field(default_factory=ReachabilitySection)
    membership: MembershipSection = field(default_factory=MembershipSection)
    blocks: BlocksSection = field(default_factory=BlocksSection)
    db: DbSection = field(default_factory=DbSection)
    spark: SparkSection = field(default_factory=SparkSection)

    @property
    def data_path(self) -> Path:
        return Path(self.node.data_dir).expanduser()

    @property
    def database_url(self) -> str:
        if self.storage.url:
            return self.storage.url
        return f"sqlite:///{(self.data_path / 'syncnode.db').resolve()}"


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Load and validate configuration; ``overrides`` maps ``"section.key"`` to CLI values.

    The loader (``node.config.load``) reads the sections declared here.
    """
    config = load(Config, path, env=env, overrides=overrides)
    _check_relations(config)
    return config


def _check_relations(config: Config) -> None:
    """Constraints between keys, each reported under the key a user would change."""
    sds = config.sds
    if sds.repair_t_min_s >= sds.repair_t_max_s:
        # SDS-R draws a repair's wait as hash % (T_max - T_min) + T_min (the SDS spec,
        # "Determine T_req"): equal values leave no range to spread the group's requests over
        # (a modulo by zero), so the rule is strict, as sync.sds.SdsConfig checks it.
        raise ConfigError("sds.repair_t_min_s", f"must be < sds.repair_t_max_s (SDS-R spreads "
                          "repair requests over T_max - T_min), got "
                          f"{shown(sds.repair_t_min_s)} >= {shown(sds.repair_t_max_s)}")
    if sds.repair_t_min_s < FETCH_GRACE_S:
        # SDS-R's requests and answers are group-wide floods; fetch-by-id closes a gap with one
        # request on one link after this grace, so SDS-R must wait at least as long.
        raise ConfigError("sds.repair_t_min_s", f"must be >= {shown(FETCH_GRACE_S)}, the "
                          "fetch-by-id grace (docs/replication.md \"Closing gaps\"), got "
                          f"{shown(sds.repair_t_min_s)}")


