"""Configuration: a TOML file, then ``SYNCNODE_<SECTION>_<KEY>`` variables, then CLI flags.

Every key is declared once, here, with its type, default and check; ``config.example.toml`` shows
them all. Anything wrong is a ``ConfigError`` naming the key, which the CLI prints on one line
before exiting with status 2.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.config_checks import (
    check_database_url,
    check_dir,
    check_listen_multiaddrs,
    check_peer_id,
    check_peer_ids,
    check_peer_multiaddrs,
)
from sync.crdt import TableSchema
from sync.recon.eventid import CIP124_DRAFT, LAYOUTS

__all__ = [
    "ApiConfig",
    "BlocksSection",
    "Config",
    "ConfigError",
    "DbSection",
    "FetchSection",
    "NodeConfig",
    "P2PSection",
    "PeersSection",
    "ReconSection",
    "SdsSection",
    "SparkSection",
    "StorageConfig",
    "is_loopback_host",
    "load_config",
    "parse_host_port",
]

ENV_PREFIX = "SYNCNODE_"
MIN_FRAME_BYTES = 1024 * 1024


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or impossible."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"config error: {key}: {message}")


Check = Callable[[Any], str | None]


def _opt(default: Any, check: Check | None = None) -> Any:
    return field(default=default, metadata={"check": check} if check else {})


def _positive(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def _non_negative(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


def _fraction(v: Any) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


def _one_of(*allowed: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in allowed else f"must be one of {', '.join(allowed)}"

    return check


def parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _host_port(v: Any) -> str | None:
    try:
        parse_host_port(v)
    except ValueError as exc:
        return str(exc)
    return None


def _nonempty_names(v: Any) -> str | None:
    if not v:
        return "at least one channel is required"
    bad = [c for c in v if not c or len(c) > 128 or not c.isprintable()]
    return f"invalid channel name {bad[0]!r}" if bad else None


@dataclass(frozen=True)
class NodeConfig:
    data_dir: str = _opt("./data", lambda v: check_dir(v) if v else "must not be empty")
    network_id: int = _opt(1, lambda v: None if 0 <= v < 2**63 else "must be in [0, 2^63)")
    log_level: str = _opt("info", _one_of("debug", "info", "warning", "error"))
    log_format: str = _opt("text", _one_of("text", "json"))


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (brackets around IPv6 allowed)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_names(v: Any) -> str | None:
    bad = [h for h in v if not re.fullmatch(r"[A-Za-z0-9.-]{1,253}|\[?[0-9A-Fa-f:.]+\]?", h)]
    return f"not a host name or address (no port): {bad[0]!r}" if bad else None


@dataclass(frozen=True)
class ApiConfig:
    listen: str = _opt("127.0.0.1:8700", _host_port)
    allow_remote: bool = _opt(False)
    hosts: tuple[str, ...] = _opt((), _host_names)
    max_body_bytes: int = _opt(4 * 1024 * 1024, _positive)
    body_timeout_s: float = _opt(30.0, _positive)
    page_max_bytes: int = _opt(8 * 1024 * 1024, _positive)
    idle_timeout_s: float = _opt(5.0, _positive)
    max_follows: int = _opt(64, _positive)
    idempotency_ttl_s: float = _opt(86400.0, _positive)
    idempotency_max_keys: int = _opt(100_000, _positive)

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
class StorageConfig:
    url: str = _opt("", check_database_url)
    sqlite_synchronous: str = _opt("FULL", _one_of("NORMAL", "FULL"))
    batch_max_events: int = _opt(512, _positive)
    batch_max_delay_ms: int = _opt(5, _non_negative)


@dataclass(frozen=True)
class P2PSection:
    listen: tuple[str, ...] = _opt(("/ip4/127.0.0.1/tcp/4001",), check_listen_multiaddrs)
    bootstrap: tuple[str, ...] = _opt((), check_peer_multiaddrs)
    allowed_peers: tuple[str, ...] = _opt((), check_peer_ids)
    channels: tuple[str, ...] = _opt(("general",), _nonempty_names)
    dial_timeout_s: float = _opt(10.0, _positive)
    read_timeout_s: float = _opt(30.0, _positive)
    max_frame_bytes: int = _opt(4 * 1024 * 1024, lambda v: None if v >= MIN_FRAME_BYTES else (
        f"must be >= {MIN_FRAME_BYTES} (a frame must hold the largest event with its envelope)"))
    dht: bool = _opt(False)
    dht_interval_s: float = _opt(60.0, _positive)
    dht_timeout_s: float = _opt(30.0, _positive)
    gossip_linger_ms: int = _opt(100, _non_negative)
    test_drop_incoming_gossip: float = _opt(0.0, _fraction)
    # -- gossip floods (docs/security.md "Gossip floods") --
    gossip_peer_rate: float = _opt(1000.0, _positive)
    gossip_peer_burst: float = _opt(5000.0, lambda v: None if v >= 1 else "must be >= 1")
    gossip_queue_bytes: int = _opt(64 * 1024 * 1024, _positive)
    peer_event_queue: int = _opt(1024, _positive)


def _channel_profiles(v: Any) -> str | None:
    for item in v:
        name, sep, profile = str(item).partition("=")
        if not sep or not name or profile not in ("syncnode", "waku"):
            return f"expected CHANNEL=syncnode|waku, got {item!r}"
    return None


@dataclass(frozen=True)
class SdsSection:
    causal_history_size: int = _opt(2, _positive)
    bloom_capacity: int = _opt(1000, _positive)
    bloom_fp_rate: float = _opt(0.01, lambda v: None if 0 < v < 1 else "must be in (0, 1)")
    resend_interval_s: float = _opt(10.0, _positive)
    max_resends: int = _opt(5, _non_negative)
    lost_timeout_s: float = _opt(300.0, _positive)
    sync_interval_s: float = _opt(30.0, _positive)
    repair_t_min_s: float = _opt(30.0, _positive)
    repair_t_max_s: float = _opt(120.0, _positive)
    profile: str = _opt("syncnode", _one_of("syncnode", "waku"))
    channel_profiles: tuple[str, ...] = _opt((), _channel_profiles)
    # -- limits against hostile peers (docs/security.md "Clocks", "SDS buffers") --
    max_lamport_ahead_ms: int = _opt(600_000, lambda v: None if 0 <= v <= 1 << 40
                                     else "must be in [0, 2^40]")
    max_waiting: int = _opt(10_000, _positive)
    max_waiting_bytes: int = _opt(64 << 20, _positive)
    max_waiting_per_sender: int = _opt(1_000, _positive)
    max_waiting_bytes_per_sender: int = _opt(16 << 20, _positive)
    max_missing: int = _opt(10_000, _positive)
    max_missing_per_sender: int = _opt(1_000, _positive)
    repair_cache_bytes: int = _opt(64 << 20, _non_negative)
    ack_min_filters: int = _opt(2, _positive)
    # -- memory (docs/architecture.md "Memory independent of the log's length") --
    delivered_window: int = _opt(100_000, lambda v: None if v >= 1000 else "must be >= 1000")


@dataclass(frozen=True)
class ReconSection:
    interval_s: float = _opt(10.0, _positive)
    fanout: int = _opt(16, lambda v: None if 2 <= v <= 256 else "must be within 2..256")
    session_timeout_s: float = _opt(60.0, _positive)
    fetch_batch: int = _opt(500, _positive)
    gossip_grace_s: float = _opt(3.0, _non_negative)
    event_id_layout: str = _opt(CIP124_DRAFT, _one_of(*LAYOUTS))
    # Transfer limits (docs/security.md "Recon").
    claim_timeout_s: float = _opt(15.0, _positive)
    max_key_list: int = _opt(256, lambda v: None if v >= 8 else "must be >= 8")
    max_missing_keys: int = _opt(100_000, _positive)
    serve_batch_bytes: int = _opt(1 << 20, lambda v: None if v >= 1 << 20 else "must be >= 1 MiB")
    max_sessions: int = _opt(16, _positive)
    # -- key store memory (docs/architecture.md "Recon key store") --
    keystore_bucket_keys: int = _opt(256, lambda v: None if 16 <= v <= 65536 else
                                     "must be between 16 and 65536")
    keystore_max_buckets: int = _opt(32768, lambda v: None if v >= 64 else "must be >= 64")
    keystore_cache_keys: int = _opt(131_072, _non_negative)
    # Saved summary: restart without rescanning every key (0: only at clean shutdown).
    summary_save_interval_s: float = _opt(60.0, _non_negative)
    # Processes verifying fetched events outside the daemon (docs/architecture.md "Ingest").
    ingest_workers: int = _opt(2, lambda v: None if 0 <= v <= 64 else "must be in [0, 64]")
    # The workers also append the events they verified (docs/cluster-bench.md, "the ingest
    # worker as writer"); false: the daemon's store writes them, as before.
    ingest_workers_write: bool = _opt(True)


@dataclass(frozen=True)
class FetchSection:
    """Fetch-by-id (docs/security.md "Fetch by id")."""

    max_ids: int = _opt(256, _positive)
    serve_batch_bytes: int = _opt(1 << 20, lambda v: None if v >= 1 << 20 else "must be >= 1 MiB")
    max_streams_per_peer: int = _opt(2, _positive)
    max_streams: int = _opt(16, _positive)


@dataclass(frozen=True)
class PeersSection:
    """Peer standing: scores, bans (docs/security.md "Peer scores and bans")."""

    ban_threshold: float = _opt(-100.0, lambda v: None if v < 0 else "must be < 0")
    ban_s: float = _opt(60.0, _positive)
    max_ban_s: float = _opt(3600.0, _positive)
    score_half_life_s: float = _opt(300.0, _positive)
    max_tracked: int = _opt(10_000, _positive)


def _block_routes(v: Any) -> str | None:
    for entry in v:
        pattern, sep, channel = entry.rpartition("=")
        if not sep or not pattern or _nonempty_names((channel,)):
            return f"expected REGEX=CHANNEL, got {entry!r}"
        if problem := _regexes((pattern,)):
            return problem
    return None


def _regexes(v: Any) -> str | None:
    for pattern in v:
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"invalid regex {pattern!r}: {exc}"
    return None


def _peer_ids(v: Any) -> str | None:
    bad = [p for p in v if not p or len(p) > 128 or not p.isalnum()]
    return f"not a peer id: {bad[0]!r}" if bad else None


@dataclass(frozen=True)
class BlocksSection:
    enabled: bool = _opt(False)
    channel: str = _opt("blocks", lambda v: _nonempty_names((v,)))
    routes: tuple[str, ...] = _opt((), _block_routes)
    tracked: tuple[str, ...] = _opt((), _regexes)
    reorg_threshold: int = _opt(128, _non_negative)
    subbatch_chunk: int = _opt(64, _positive)
    producer_layout: str = _opt("syncnode", _one_of("syncnode", "go"))
    # Peer ids whose Cardinal messages count (docs/security.md "Application roles").
    producers: tuple[str, ...] = _opt((), _peer_ids)

    def __post_init__(self) -> None:
        if self.enabled and not self.producers:
            raise ConfigError("blocks.producers", "required when blocks.enabled = true: the "
                              "peer ids whose block messages count (anyone else could reorg "
                              "every consumer)")


@dataclass(frozen=True)
class DbSection:
    channel: str = _opt("db", lambda v: _nonempty_names((v,)))
    # [db.tables.NAME] columns = {COLUMN = TYPE, ...}, writers = [PEER_ID, ...]; see parse_tables.
    tables: tuple[TableSchema, ...] = _opt(())
    # "TABLE=PEER_ID": only that peer's schema declarations count for TABLE (docs/crdt.md).
    owners: tuple[str, ...] = _opt((), lambda v: _owner_pins(v)[1])
    # Peer ids whose schema declarations count at all; empty: any peer may declare a table.
    declarers: tuple[str, ...] = _opt((), check_peer_ids)
    # Lamport ticks (about milliseconds) after which a tombstone is forgotten; 0: never.
    stability_window: int = _opt(7 * 24 * 3600 * 1000, _non_negative)
    max_schema_versions: int = _opt(64, _positive)
    max_tables: int = _opt(256, _positive)

    def owner_pins(self) -> dict[str, str]:
        return _owner_pins(self.owners)[0]


def _owner_pins(items: Any) -> tuple[dict[str, str], str | None]:
    pins: dict[str, str] = {}
    for item in items:
        table, sep, peer = str(item).partition("=")
        if not sep or not table or not peer:
            return {}, f"expected TABLE=PEER_ID entries, got {item!r}"
        if table in pins:
            return {}, f"table {table} pinned twice"
        if problem := check_peer_id(peer):
            return {}, f"{item!r}: {problem}"
        pins[table] = peer
    return pins, None


def parse_tables(key: str, value: Any, *, from_text: bool) -> tuple[TableSchema, ...]:
    """``db.tables``: a TOML table (a JSON object in the environment) of table declarations."""
    if from_text:
        try:
            value = json.loads(str(value))
        except (ValueError, RecursionError):
            raise ConfigError(key, "expected a JSON object of table declarations") from None
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a table of table declarations, got {value!r}")
    schemas = []
    for name, decl in value.items():
        where = f"{key}.{name}"
        if not isinstance(decl, dict) or not isinstance(decl.get("columns"), dict) or (
            set(decl) - {"columns", "writers"}
        ):
            raise ConfigError(where, "expected columns = {COLUMN = TYPE, ...} and optionally "
                                     "writers = [PEER_ID, ...]")
        writers = decl.get("writers")
        if writers is not None and (
            not isinstance(writers, list) or not all(isinstance(w, str) for w in writers)
        ):
            raise ConfigError(f"{where}.writers", f"expected a list of peer ids, got {writers!r}")
        if writers is not None and (problem := check_peer_ids(writers)):
            raise ConfigError(f"{where}.writers", problem)
        try:
            schemas.append(TableSchema(name, decl["columns"],
                                       None if writers is None else frozenset(writers)))
        except (ValueError, TypeError) as exc:
            raise ConfigError(where, str(exc)) from None
    return tuple(sorted(schemas, key=lambda s: s.name))


def _memory_size(v: Any) -> str | None:
    return None if re.fullmatch(r"[1-9][0-9]*[kmgt]?", str(v)) else "must be like 512m or 4g"


@dataclass(frozen=True)
class SparkSection:
    enabled: bool = _opt(True)
    master: str = _opt("local[*]", lambda v: None if re.fullmatch(
        r"local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?|[a-z0-9]+://\S+|yarn", v) else
        "expected local, local[N], local[*] or spark://HOST:PORT")
    partitions: int = _opt(8, _positive)
    snapshot_dir: str = _opt("", check_dir)
    snapshot_interval_s: float = _opt(0.0, _non_negative)
    snapshot_every_events: int = _opt(0, _non_negative)
    period_ms: int = _opt(60_000, _positive)
    settle_ms: int = _opt(60_000, _non_negative)
    rehash: bool = _opt(False)
    job_timeout_s: float = _opt(21_600.0, _positive)
    driver_memory: str = _opt("1g", _memory_size)
    max_events_per_file: int = _opt(100_000, _positive)


@dataclass(frozen=True)
class Config:
    node: NodeConfig = field(default_factory=NodeConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    p2p: P2PSection = field(default_factory=P2PSection)
    sds: SdsSection = field(default_factory=SdsSection)
    recon: ReconSection = field(default_factory=ReconSection)
    fetch: FetchSection = field(default_factory=FetchSection)
    peers: PeersSection = field(default_factory=PeersSection)
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

    The loader (``node.config_load``) reads the sections declared here.
    """
    from node.config_load import load

    return load(path, env=env, overrides=overrides)
