"""The configuration sections of the applications on the log: block streams (``[blocks]``),
the replicated database (``[db]``, with its ``db.tables`` declarations) and Spark (``[spark]``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from node.config.checks import check_dir, check_peer_id, check_peer_ids
from node.config.fields import (
    DAY,
    ConfigError,
    channel_names,
    non_negative,
    one_of,
    opt,
    positive,
    shown,
)
from sync.crdt import TableSchema

__all__ = ["BlocksSection", "DbSection", "SparkSection", "parse_tables"]


def _block_routes(v: Any) -> str | None:
    for entry in v:
        pattern, sep, channel = entry.rpartition("=")
        if not sep or not pattern or channel_names((channel,)):
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
    enabled: bool = opt(False)
    channel: str = opt("blocks", lambda v: channel_names((v,)))
    routes: tuple[str, ...] = opt((), _block_routes)
    tracked: tuple[str, ...] = opt((), _regexes)
    reorg_threshold: int = opt(128, non_negative, most=1_000_000)
    subbatch_chunk: int = opt(64, positive, most=100_000)
    producer_layout: str = opt("syncnode", one_of("syncnode", "go"))
    # Peer ids whose Cardinal messages count (docs/security.md "Application roles").
    producers: tuple[str, ...] = opt((), _peer_ids)

    def __post_init__(self) -> None:
        if self.enabled and not self.producers:
            raise ConfigError("blocks.producers", "required when blocks.enabled = true: the "
                              "peer ids whose block messages count (anyone else could reorg "
                              "every consumer)")


@dataclass(frozen=True)
class DbSection:
    # On without a table in db.tables: tables come from `syncnode db declare` (issue 29).
    enabled: bool = opt(False)
    channel: str = opt("db", lambda v: channel_names((v,)))
    # [db.tables.NAME] columns = {COLUMN = TYPE, ...}, writers = [PEER_ID, ...]; see parse_tables.
    tables: tuple[TableSchema, ...] = opt(())
    # "TABLE=PEER_ID": only that peer's schema declarations count for TABLE (docs/crdt.md).
    owners: tuple[str, ...] = opt((), lambda v: _owner_pins(v)[1])
    # Peer ids whose schema declarations count at all; empty: any peer may declare a table.
    declarers: tuple[str, ...] = opt((), check_peer_ids)
    # Lamport ticks (about milliseconds) after which a tombstone is forgotten; 0: never.
    stability_window: int = opt(7 * 24 * 3600 * 1000, non_negative, most=1 << 42)
    # Milliseconds after this node first saw a table at which its owner is settled: later
    # declarations from anyone else cannot take it over (docs/crdt.md "Settled owners").
    settle_ms: int = opt(
        600_000, lambda v: None if v >= 1000 else "must be >= 1000", most=30 * DAY * 1000
    )
    max_schema_versions: int = opt(64, positive, most=100_000)
    max_tables: int = opt(256, positive, most=100_000)

    @property
    def active(self) -> bool:
        """The node replicates the db channel: asked for, or a table to declare."""
        return self.enabled or bool(self.tables)
    # Row changes kept for subscribers (GET /v1/db/{table}/changes), over every table; a
    # subscriber resuming from before the oldest kept is told so (410).
    changes_retain: int = opt(100_000, positive, most=100_000_000)

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
        raise ConfigError(key, f"expected a table of table declarations, got {shown(value)}")
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
            raise ConfigError(f"{where}.writers",
                              f"expected a list of peer ids, got {shown(writers)}")
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
    enabled: bool = opt(True)
    master: str = opt("local[*]", lambda v: None if re.fullmatch(
        r"local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?|[a-z0-9]+://\S+|yarn", v) else
        "expected local, local[N], local[*] or spark://HOST:PORT")
    partitions: int = opt(8, positive, most=100_000)
    snapshot_dir: str = opt("", check_dir)
    # Peer ids whose signed snapshots `bootstrap` and `snapshot pull` accept (empty: this data
    # dir's own key and p2p.allowed_peers); the --signer flag replaces them.
    snapshot_signers: tuple[str, ...] = opt((), check_peer_ids)
    snapshot_interval_s: float = opt(0.0, non_negative, most=365 * DAY)
    snapshot_every_events: int = opt(0, non_negative, most=1 << 40)
    period_ms: int = opt(60_000, positive, most=365 * DAY * 1000)
    settle_ms: int = opt(60_000, non_negative, most=30 * DAY * 1000)
    rehash: bool = opt(False)
    job_timeout_s: float = opt(21_600.0, positive, most=30 * DAY)
    driver_memory: str = opt("1g", _memory_size)
    max_events_per_file: int = opt(100_000, positive, most=10_000_000)
