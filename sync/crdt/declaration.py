"""Table schemas as signed declarations on the log, and the schema in force at a Lamport time.

A declaration is the content of an event on the db channel, like a message, e.g.
``{"columns":[["name","text"]],"crdt":1,"op":"schema","table":"users","writers":null}``; its
timestamp and sender come from the signed event. The rules (docs/crdt.md, "Schemas on the log"):

- **Owner.** The sender of the table's first *claim* in (claim time, sender, bytes) order, where
  a declaration's claim time is its event's own Lamport time (``claimed_at``): ``since`` dates a
  version, never a claim, so a declaration backdated with ``since`` claims the table only from
  when it was signed, on every replica alike (however late it joined). Unless the node pins the
  owner (``owner=``): then only that sender's declarations count.
- **Settling.** With ``settle_ms``, a table's owner is *settled* once ``settle_ms`` have passed
  (on the node's receipt clock, passed in as ``now_ms``) since the node first admitted the
  table: from then on it is pinned like a configured owner, so a declaration that arrives late
  with an early timestamp (a backdated takeover) can no longer change the owner or the
  versions; it is refused as ``takeover``. Honest concurrent declarations (nodes seeding the
  same table together) all arrive within the window, so every replica settles on the same
  owner, the first in claim order.
- **Versions.** The owner's declarations in (timestamp, bytes) order; only the first
  ``max_versions`` count.
- **Backdating.** A declaration may carry ``since`` (at most its event's timestamp): its
  timestamp is then ``since``. A node seeds its config's table that way when its log holds
  writes from before schemas were on the log (an upgraded database), so that they count.
- **In force at t.** The last version with timestamp < t. A write at exactly a version's
  Lamport time is judged by the version before (a writer that saw the version has a greater
  clock). Before the first version the table does not exist (``unknown_table``).
- **Column epochs.** A column's epoch is the timestamp of the version from which on, up to the
  latest, every version has the column with its latest type (-1: all of them). Cells written at
  or before it were written under another type, or before the column was (re)added, and read
  as NULL: after a type change, cells of the old type are never served as the new type.

All of it is a function of the *set* of declarations, so every replica that has seen the same
declarations judges every write alike, whatever the order of arrival.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType
from typing import Any

from sync.crdt.message import (
    ENCODING_VERSION,
    MAX_MESSAGE_BYTES,
    MAX_TIMESTAMP,
    CrdtMessage,
    check_event_stamp,
    message_of_document,
    parse_document,
)
from sync.crdt.schema import TableSchema
from sync.crdt.values import ColumnType
from sync.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "MAX_COLUMNS",
    "MAX_WRITERS",
    "Added",
    "SchemaBook",
    "SchemaDeclaration",
    "TableHistory",
    "decode_content",
]

MAX_COLUMNS = 256
MAX_WRITERS = 1024
_KEYS = frozenset({"columns", "crdt", "op", "table", "writers"})
_KEYS_SINCE = _KEYS | {"since"}
SCHEMA_OP = "schema"


@dataclass(frozen=True, eq=False)
class SchemaDeclaration:
    """One version of a table's schema, as declared by ``sender`` at Lamport ``timestamp``.

    Equality and hash are over (timestamp, sender, canonical bytes), like a message's, and the
    claim time. ``backdated``: the encoding carries ``since`` = ``timestamp``, which the carrying
    event's own (later) timestamp, ``claimed_at``, then does not override as the version's time;
    ``claimed_at`` (default: ``timestamp``) is what the declaration's claim to own the table is
    dated by (:attr:`claim`). Bad declarations raise ``LocalProtocolError``.
    """

    table: str
    columns: Mapping[str, ColumnType | str]
    writers: frozenset[str] | None = None
    timestamp: int = 0
    sender: str = ""
    backdated: bool = False
    claimed_at: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.columns, Mapping) or len(self.columns) > MAX_COLUMNS:
            raise LocalProtocolError(f"a schema declares at most {MAX_COLUMNS} columns")
        if self.writers is not None and (
            isinstance(self.writers, str) or len(self.writers) > MAX_WRITERS
        ):
            raise LocalProtocolError(f"a schema names at most {MAX_WRITERS} writers")
        try:
            schema = TableSchema(self.table, dict(self.columns), self.writers)
        except (ValueError, TypeError) as exc:
            raise LocalProtocolError(str(exc)) from None
        if (not isinstance(self.timestamp, int) or isinstance(self.timestamp, bool)
                or not 0 <= self.timestamp <= MAX_TIMESTAMP):
            raise LocalProtocolError("timestamp must be an unsigned 64-bit integer")
        if not isinstance(self.sender, str) or not self.sender:
            raise LocalProtocolError("sender must be a non-empty peer id")
        claimed = self.timestamp if self.claimed_at is None else self.claimed_at
        if (not isinstance(claimed, int) or isinstance(claimed, bool)
                or not self.timestamp <= claimed <= MAX_TIMESTAMP
                or (claimed != self.timestamp and not self.backdated)):
            raise LocalProtocolError("claimed_at must be the event's timestamp: at least the "
                                     "declaration's, and equal to it unless backdated")
        object.__setattr__(self, "claimed_at", claimed)
        object.__setattr__(self, "columns", schema.columns)
        object.__setattr__(self, "writers", schema.writers)
        object.__setattr__(self, "_schema", schema)
        if len(self.encoded) > MAX_MESSAGE_BYTES:
            raise LocalProtocolError(f"encoded declaration exceeds {MAX_MESSAGE_BYTES} bytes")

    @property
    def schema(self) -> TableSchema:
        return self._schema  # type: ignore[attr-defined,no-any-return]

    @cached_property
    def encoded(self) -> bytes:
        doc = {
            # [name, type] pairs: a JSON object would lose the declared order to sort_keys.
            "columns": [[c, ColumnType(t).value] for c, t in self.columns.items()],
            "crdt": ENCODING_VERSION,
            "op": SCHEMA_OP,
            "table": self.table,
            "writers": None if self.writers is None else sorted(self.writers),
        }
        if self.backdated:
            doc["since"] = self.timestamp
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8")

    @property
    def identity(self) -> tuple[int, str, bytes]:
        """The version's place: (timestamp, sender, bytes), ``since`` included."""
        return (self.timestamp, self.sender, self.encoded)

    @property
    def claim(self) -> tuple[int, str, bytes]:
        """The claim's place in the owner race: dated by the signed event, never ``since``."""
        return (self.claimed, self.sender, self.encoded)

    @property
    def claimed(self) -> int:
        return self.claimed_at  # type: ignore[return-value]  # set in __post_init__

    @property
    def order(self) -> tuple[int, str, bytes, int]:
        """A total order of declarations (identity, then claim time)."""
        return (*self.identity, self.claimed)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SchemaDeclaration):
            return NotImplemented
        return self.order == other.order

    def __hash__(self) -> int:
        return hash(self.order)


def _declaration_of_document(doc: dict[str, Any], raw: bytes, *, timestamp: int,
                             sender: str) -> SchemaDeclaration:
    if doc.keys() != _KEYS and doc.keys() != _KEYS_SINCE:
        keys = ", ".join(sorted(_KEYS))
        raise RemoteProtocolError(f"schema declaration must have keys {keys} (and since)",
                                  sender)
    columns, writers = doc["columns"], doc["writers"]
    if not isinstance(columns, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
        for p in columns
    ):
        raise RemoteProtocolError("schema columns must be [name, type] pairs", sender)
    if writers is not None and (
        not isinstance(writers, list) or not all(isinstance(w, str) for w in writers)
    ):
        raise RemoteProtocolError("schema writers must be null or a list of peer ids", sender)
    check_event_stamp(timestamp, sender)
    since = doc.get("since")
    if since is not None and (type(since) is not int or not 0 <= since <= timestamp):
        raise RemoteProtocolError("schema since must be an integer from 0 to the event's "
                                  "timestamp", sender)
    try:
        # A repeated name collapses here, so the re-encoding check below rejects it.
        declaration = SchemaDeclaration(doc["table"], dict(columns),
                                        None if writers is None else frozenset(writers),
                                        timestamp if since is None else since, sender,
                                        backdated=since is not None, claimed_at=timestamp)
    except LocalProtocolError as exc:
        raise RemoteProtocolError(f"bad schema declaration: {exc}", sender) from None
    if declaration.encoded != raw:
        raise RemoteProtocolError("schema declaration is not in canonical encoding", sender)
    return declaration


def decode_content(
    data: bytes, *, timestamp: int, sender: str, max_size: int = MAX_MESSAGE_BYTES
) -> CrdtMessage | SchemaDeclaration:
    """A db channel event's content: a message or a schema declaration (both canonical).

    Anything malformed raises ``RemoteProtocolError`` (with ``peer=sender``)."""
    doc = parse_document(data, sender=sender, max_size=max_size)
    if doc.get("op") == SCHEMA_OP:
        return _declaration_of_document(doc, bytes(data), timestamp=timestamp, sender=sender)
    return message_of_document(doc, bytes(data), timestamp=timestamp, sender=sender)


class TableHistory:
    """The versions of one table, computed from the declarations kept for it."""

    __slots__ = ("_stamps", "claim", "epochs", "owner", "table", "versions")

    def __init__(self, table: str, declarations: Iterable[SchemaDeclaration], *,
                 owner: str | None = None, max_versions: int = 64) -> None:
        candidates = sorted(
            (d for d in set(declarations) if owner is None or d.sender == owner),
            key=lambda d: d.order,
        )
        self.table = table
        first = min(candidates, key=lambda d: d.claim) if candidates else None
        self.owner = owner if owner is not None or first is None else first.sender
        mine = [d for d in candidates if d.sender == self.owner]
        #: The owner's earliest claim (kept even when it is not among the versions kept).
        self.claim: SchemaDeclaration | None = min(mine, key=lambda d: d.claim) if mine else None
        self.versions = tuple(mine[:max_versions])
        self._stamps = [v.timestamp for v in self.versions]
        self.epochs: Mapping[str, int] = MappingProxyType(self._epochs())

    def _epochs(self) -> dict[str, int]:
        versions = self.versions
        if not versions:
            return {}
        out: dict[str, int] = {}
        for column, kind in versions[-1].columns.items():
            epoch = -1
            # The newest version before which the column was absent or of another type.
            for i in range(len(versions) - 1, 0, -1):
                if versions[i - 1].columns.get(column) != kind:
                    epoch = versions[i].timestamp
                    break
            out[column] = epoch
        return out

    def at(self, timestamp: int) -> TableSchema | None:
        """The schema in force for a write at ``timestamp`` (None: the table does not exist)."""
        stamps = self._stamps
        if stamps and timestamp > stamps[-1]:
            return self.versions[-1].schema  # the common case: a write after every version
        index = bisect.bisect_left(stamps, timestamp)
        return None if index == 0 else self.versions[index - 1].schema

    @property
    def latest(self) -> TableSchema | None:
        return self.versions[-1].schema if self.versions else None

    @property
    def timeline(self) -> tuple[tuple[int, str, bytes], ...]:
        """What decides every write: equal timelines judge every write alike."""
        return tuple(v.identity for v in self.versions)


class Added(StrEnum):
    """What ``SchemaBook.add`` did with a declaration."""

    DUPLICATE = "duplicate"
    NOT_OWNER = "not_owner"  # another sender's, and never able to count (counted, not kept)
    NOT_DECLARER = "not_declarer"  # from a peer outside the book's ``declarers``
    TOO_MANY_VERSIONS = "too_many_versions"  # the owner's, beyond max_versions
    TOO_MANY_TABLES = "too_many_tables"  # a new table, later than max_tables earlier ones
    TAKEOVER = "takeover"  # another sender's, earlier than the pinned or settled owner's first
    # declaration: it would have taken the table over (refused; costs the sender standing)
    CHANGED = "changed"  # the table's versions changed: re-evaluate its writes
    RESCAN = "rescan"  # the owner changed or the table was (re)admitted: gather the table's
    # declarations from the log again (``reset_table``), then re-evaluate its writes


class SchemaBook:
    """The kept declarations of every table and their histories (bounded, see ``Added``).

    ``pins``: table -> owner fixed by this node's config; ``declarers``: if set, the only peers
    whose declarations count at all (pins included). ``max_tables``: the tables kept are
    the ones with the earliest first declarations; admitting an earlier one evicts the latest
    (``evicted`` lists them until ``take_evicted``). ``settle_ms``: a table's owner is settled
    (pinned, ``settled``) once that long has passed since the table was first admitted, on the
    clock passed to ``add``/``settle`` as ``now_ms`` (None: owners never settle; then the book
    is a function of the set of declarations alone).
    """

    def __init__(self, declarations: Iterable[SchemaDeclaration] = (), *,
                 pins: Mapping[str, str] | None = None, max_versions: int = 64,
                 max_tables: int = 256, declarers: Iterable[str] | None = None,
                 settle_ms: int | None = None) -> None:
        self.pins = dict(pins or {})
        self.declarers = None if declarers is None else frozenset(declarers)
        self.max_versions = max_versions
        self.max_tables = max_tables
        self.settle_ms = settle_ms
        #: table -> owner settled on this node (learned pins; persisted by the caller).
        self.settled: dict[str, str] = {}
        #: table -> the ``now_ms`` at which this node first admitted it.
        self.seen: dict[str, int] = {}
        self._kept: dict[str, set[SchemaDeclaration]] = {}
        self._history: dict[str, TableHistory] = {}
        self._evicted: list[str] = []
        for declaration in sorted(declarations, key=lambda d: d.order):
            self.add(declaration)

    def _first(self, table: str) -> tuple[int, str, bytes]:
        return self._history[table].versions[0].identity

    def _first_claim(self, table: str) -> tuple[int, str, bytes]:
        claim = self._history[table].claim
        assert claim is not None  # a kept table has at least one declaration
        return claim.claim

    def owner_pin(self, table: str) -> str | None:
        """The owner fixed for ``table``: by config, else settled on this node."""
        return self.pins.get(table) or self.settled.get(table)

    def settle(self, now_ms: int, table: str | None = None) -> list[str]:
        """Settle the owner of every table (or ``table``) admitted ``settle_ms`` or more before
        ``now_ms``; returns the tables settled now."""
        if self.settle_ms is None:
            return []
        out: list[str] = []
        for name in [table] if table is not None else list(self._history):
            history = self._history.get(name)
            if history is None or name in self.pins or name in self.settled:
                continue
            if now_ms - self.seen.get(name, now_ms) >= self.settle_ms and history.owner:
                self.settled[name] = history.owner
                out.append(name)
        return out

    def add(self, declaration: SchemaDeclaration, now_ms: int | None = None) -> Added:
        """Take ``declaration`` in; ``now_ms``: when it arrived (settles the table first)."""
        table = declaration.table
        if self.declarers is not None and declaration.sender not in self.declarers:
            return Added.NOT_DECLARER
        if now_ms is not None:
            self.settle(now_ms, table)
        pinned = self.owner_pin(table)
        history = self._history.get(table)
        if pinned is not None and declaration.sender != pinned:
            # An attempt: backdated (``since``) or claimed before the owner's first version.
            if history is not None and history.versions and (
                    declaration.identity < self._first(table)
                    or declaration.claim < self._first_claim(table)):
                return Added.TAKEOVER
            return Added.NOT_OWNER
        if history is None:
            rescan = False
            if len(self._history) >= self.max_tables:
                latest = max(self._history, key=self._first_claim)
                if declaration.claim > self._first_claim(latest):
                    return Added.TOO_MANY_TABLES
                self.drop_table(latest)
                self._evicted.append(latest)
                rescan = True  # declarations of it may have been refused while it was out
            self._set(table, {declaration})
            if now_ms is not None:
                self.seen.setdefault(table, now_ms)
            return Added.RESCAN if rescan else Added.CHANGED
        kept = self._kept[table]
        if declaration in kept:
            return Added.DUPLICATE
        if declaration.sender != history.owner:
            if declaration.claim > self._first_claim(table):
                return Added.NOT_OWNER
            self._set(table, {declaration})
            return Added.RESCAN
        versions = history.versions
        if (len(versions) >= self.max_versions and declaration.order > versions[-1].order
                and declaration.claim >= self._first_claim(table)):
            return Added.TOO_MANY_VERSIONS
        self._set(table, kept | {declaration})
        return Added.CHANGED

    def _set(self, table: str, declarations: set[SchemaDeclaration]) -> None:
        history = TableHistory(table, declarations, owner=self.owner_pin(table),
                               max_versions=self.max_versions)
        self._history[table] = history
        # The owner's earliest claim stays kept (and stored) even beyond max_versions: it is
        # what later claims are compared with.
        self._kept[table] = set(history.versions) | (
            {history.claim} if history.claim is not None else set())

    def reset_table(self, table: str, declarations: Iterable[SchemaDeclaration]) -> None:
        """Recompute ``table`` from every declaration of it (gathered from the log); a table
        the book does not keep (evicted meanwhile) stays out."""
        if table not in self._history:
            return
        mine = [d for d in declarations if d.table == table]
        pinned = self.owner_pin(table)
        mine = [d for d in mine if (pinned is None or d.sender == pinned) and (
            self.declarers is None or d.sender in self.declarers)]
        if mine:
            self._set(table, set(mine))

    def drop_table(self, table: str) -> None:
        self._history.pop(table, None)
        self._kept.pop(table, None)
        # A settled owner stays settled: evicting the table (max_tables) must not reopen it.
        self.seen.pop(table, None)

    def copy(self) -> SchemaBook:
        """An independent book with the same contents (declarations are immutable)."""
        other = SchemaBook(pins=self.pins, max_versions=self.max_versions,
                           max_tables=self.max_tables, declarers=self.declarers,
                           settle_ms=self.settle_ms)
        other.settled, other.seen = dict(self.settled), dict(self.seen)
        other._kept = {t: set(d) for t, d in self._kept.items()}
        other._history = dict(self._history)
        other._evicted = list(self._evicted)
        return other

    def take_evicted(self) -> list[str]:
        out, self._evicted = self._evicted, []
        return out

    def history(self, table: str) -> TableHistory | None:
        return self._history.get(table)

    def at(self, table: str, timestamp: int) -> TableSchema | None:
        history = self._history.get(table)
        return None if history is None else history.at(timestamp)

    def latest(self, table: str) -> TableSchema | None:
        history = self._history.get(table)
        return None if history is None else history.latest

    def epochs(self, table: str) -> Mapping[str, int]:
        history = self._history.get(table)
        return MappingProxyType({}) if history is None else history.epochs

    def tables(self) -> list[str]:
        return sorted(self._history)

    def declarations(self, table: str) -> list[SchemaDeclaration]:
        """The kept declarations of ``table`` (what storage keeps), in identity order."""
        return sorted(self._kept.get(table, ()), key=lambda d: d.order)

    def __contains__(self, table: object) -> bool:
        return table in self._history
