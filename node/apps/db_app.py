"""The replicated database on the event log: the Spindexer CRDT as a log application.

Every CRDT message and every schema declaration (``sync.crdt``) is the content of one event on
the db channel; its timestamp is the event's Lamport timestamp and its sender the event's peer
id. :class:`DbApplication` applies the committed events in storage order: it decodes a batch,
loads the state of every entity the batch touches with a few queries, runs the pure rules
(``sync.crdt.step``, against the schema version in force at each write's timestamp) in memory
and writes the net change back (``storage.crdt.write_states``), in the transaction that also
advances its cursor. A declaration that changes a table's versions re-derives that table from
the log (every write is judged again); once the node has caught up with its log, tombstones
older than the stability window are forgotten. So the tables are a function of the log, and a
new replica rebuilds them by replaying it. Bad content is rejected and counted, never raised.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

import trio
from sqlalchemy import Connection

from node.apps.db_log import (
    channel_max_seq,
    compact_tombstones,
    declarations_in_log,
    decode_batch_received,
    has_legacy_writes,
    log_of,
)
from node.apps.db_metrics import metric_of
from node.apps.db_owners import restore_owners, save_owners
from node.clock import Clock
from node.config.apps import DbSection
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import StoredEvent, get_state, put_state
from storage.crdt import (
    EntityKey,
    clear_table,
    load_declarations,
    load_states,
    store_declarations,
    write_states,
)
from storage.crdt_changes import PendingChange, changes_of, record_changes
from sync.crdt import (
    EMPTY,
    Added,
    CrdtMessage,
    Effect,
    EntityState,
    Reject,
    SchemaBook,
    SchemaDeclaration,
    count_effects,
    step,
)

__all__ = ["APP_NAME", "DbApplication", "book_of"]

log = logging.getLogger("syncnode.db")

APP_NAME = "db"
# Committed entity states kept in memory, so that a batch touching recently written entities
# does not read them back from SQL (applying is then mostly decoding and the rules).
CACHE_ENTITIES = 100_000
# A long re-derivation (an upgraded database, a big table) logs its progress this often.
PROGRESS_EVERY_S = 5.0
_HIGH_KEY = f"app/{APP_NAME}/high"


def book_of(section: DbSection) -> SchemaBook:
    return SchemaBook(pins=section.owner_pins(), max_versions=section.max_schema_versions,
                      max_tables=section.max_tables, declarers=section.declarers or None,
                      settle_ms=section.settle_ms)


class _Pending:
    """What a batch changed in memory, taken over once its transaction committed."""

    def __init__(self, book: SchemaBook, high: dict[str, int], counts: Counter[str],
                 states: dict[EntityKey, EntityState], redone: set[str],
                 compacted: dict[str, int], takeovers: list[str]) -> None:
        self.book, self.high, self.counts = book, high, counts
        self.states, self.redone, self.compacted = states, redone, compacted
        self.takeovers = takeovers


class DbApplication:
    """The :class:`node.apps.runner.LogApplication` of the replicated database.

    ``apply`` runs in worker threads, one batch at a time; ``after_commit`` in the trio thread.
    Its in-memory figures (schema book, newest write per table, counts, cache) are taken over
    only once the batch committed, so a failed and retried batch changes nothing twice.
    """

    def __init__(self, section: DbSection, metrics: Metrics | None = None, *,
                 clock: Clock, on_takeover: Callable[[str], object] | None = None) -> None:
        self.name = APP_NAME
        self.section = section
        self.seeds = {s.name: s for s in section.tables}
        # Off (no db.enabled, no table seeded): no channel, so the runner never has anything
        # to apply.
        self.channels: Sequence[str] = (section.channel,) if section.active else ()
        self.book = book_of(section)
        self.metrics = metrics
        self.clock = clock  # wall(), read in the worker thread (node.clock's clocks allow it)
        #: Called (trio thread) with the signer of each refused takeover, once committed.
        self.on_takeover = on_takeover
        self.applied_seq = 0  # the last seq of the last committed batch
        self.high: dict[str, int] = {}  # table -> newest accepted write timestamp
        self._compacted: dict[str, int] = {}  # table -> horizon compacted up to (this run)
        self._loaded = False
        self._changed = trio.Event()
        self._pending: _Pending | None = None
        # Exactly what the tables hold for these entities (EMPTY: nothing); only ever updated
        # with states whose transaction committed.
        self._cache: dict[EntityKey, EntityState] = {}

    # -- LogApplication ---------------------------------------------------------------------

    def restore(self, conn: Connection, cursor: int) -> None:
        """Load the schema book and the newest writes from the committed state."""
        book = book_of(self.section)
        stored: dict[str, list[SchemaDeclaration]] = {}
        for declaration in load_declarations(conn):
            stored.setdefault(declaration.table, []).append(declaration)
        for table, declarations in sorted(stored.items()):
            # Every stored table was kept, so it is admitted (within max_tables) first.
            book.add(min(declarations, key=lambda d: d.claim))
            book.reset_table(table, declarations)
        restore_owners(conn, book, stored)
        raw = get_state(conn, _HIGH_KEY)
        self.book = book
        self.high = {str(k): int(v) for k, v in json.loads(raw).items()} if raw else {}
        self.applied_seq = max(self.applied_seq, cursor)
        self._loaded = True

    def apply(self, conn: Connection, batch: Sequence[StoredEvent]) -> None:
        if not self._loaded:
            self.restore(conn, 0)
        now_ms = int(self.clock.wall() * 1000)
        counts: Counter[str] = Counter()
        end = batch[-1].seq
        received = decode_batch_received(batch, counts)
        items = [item for item, _ in received]
        declared = [(i, at) for i, at in received if isinstance(i, SchemaDeclaration)]
        book = self.book.copy() if declared else self.book
        takeovers: list[str] = []
        causes = self._declare(book, declared, counts, takeovers)
        redo, rescan = set(causes), {t for t, (_, again) in causes.items() if again}
        if declared:
            save_owners(conn, self.book, book, now_ms)
        for table in sorted(rescan):
            book.reset_table(table, declarations_in_log(conn, self.section.channel, table, end))
        high = dict(self.high)
        # A write is judged by the declarations in force at its Lamport time, whatever the
        # order of arrival, and the merge is order-free: so a table whose versions changed is
        # re-derived from the log *before* this batch, and the batch's own writes then go
        # through the ordinary path (once each) with the new book. A table first declared by
        # this batch (a replay's first batch) has nothing before it to re-derive.
        # A subscriber of a re-derived table is told to read it again (a reset), then sees
        # the batch's own changes; a table new to this node had nothing to read.
        changes = [PendingChange(table, None, causes[table][0].timestamp,
                                 causes[table][0].sender)
                   for table in sorted(redo) if table in self.book]
        for table in sorted(redo):
            self._reevaluate(conn, book, table, batch[0].seq - 1, high, counts)
        writes = [m for m in items if isinstance(m, CrdtMessage)]
        states = self._apply_writes(conn, book, writes, high, counts, use_cache=True,
                                    stale=redo, changes=changes)
        record_changes(conn, changes, now_ms, self.section.changes_retain)
        compacted: dict[str, int] = {}
        if self.section.stability_window and channel_max_seq(conn, self.section.channel) <= end:
            # A table re-derived in this batch lost its compaction: it starts again.
            done = {t: h for t, h in self._compacted.items() if t not in redo}
            states.update(compact_tombstones(conn, high, self.section.stability_window, done,
                                             compacted, counts))
        if high != self.high:
            put_state(conn, _HIGH_KEY, json.dumps(high, sort_keys=True).encode(), now_ms)
        self._pending = _Pending(book, high, counts, states, redo, compacted, takeovers)

    def after_commit(self, batch: Sequence[StoredEvent]) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self.book, self.high = pending.book, pending.high
            for table in pending.redone:
                self._compacted.pop(table, None)
            self._compacted.update(pending.compacted)
            cache = self._cache
            if pending.redone:
                for key in [k for k in cache if k[0] in pending.redone]:
                    del cache[key]
            cache.update(pending.states)
            if len(cache) > CACHE_ENTITIES:
                # Evict the entities not touched by this batch, oldest insertion first.
                for key in list(cache)[: len(cache) - CACHE_ENTITIES]:
                    if key not in pending.states:
                        del cache[key]
            if self.metrics is not None:
                for name, amount in pending.counts.items():
                    metric, labels = metric_of(name)
                    self.metrics.inc(metric, amount, **labels)
            if self.on_takeover is not None:
                for sender in pending.takeovers:
                    self.on_takeover(sender)
        if batch:
            self.applied_seq = max(self.applied_seq, batch[-1].seq)
        self._changed.set()
        self._changed = trio.Event()

    def change_signal(self) -> trio.Event:
        """An event set after the next committed batch (call from the trio thread)."""
        return self._changed

    # -- internals ----------------------------------------------------------------------------

    def _declare(self, book: SchemaBook, declared: list[tuple[SchemaDeclaration, int]],
                 counts: Counter[str], takeovers: list[str]
                 ) -> dict[str, tuple[SchemaDeclaration, bool]]:
        """Add declarations (with when each was stored, which settles owners) to ``book``:
        table to re-derive -> (the declaration that made it so, whether its declarations must
        be gathered from the log again). Refused takeovers' signers go to ``takeovers``."""
        causes: dict[str, tuple[SchemaDeclaration, bool]] = {}
        for declaration, received_at in declared:
            added = book.add(declaration, received_at)
            counts[f"schema_{added.value}"] += 1
            if added is Added.TAKEOVER:
                takeovers.append(declaration.sender)
                log.warning("schema takeover refused", extra=kv(
                    table=declaration.table, sender=declaration.sender,
                    lamport=declaration.timestamp, owner=book.owner_pin(declaration.table)))
            for table in book.take_evicted():
                causes[table] = (declaration, causes.get(table, (declaration, False))[1])
            if added in (Added.CHANGED, Added.RESCAN):
                again = added is Added.RESCAN or causes.get(declaration.table,
                                                             (declaration, False))[1]
                causes[declaration.table] = (declaration, again)
                log.info("schema declared", extra=kv(
                    table=declaration.table, sender=declaration.sender,
                    lamport=declaration.timestamp, outcome=added.value))
        return causes

    def _apply_writes(self, conn: Connection, book: SchemaBook, messages: list[CrdtMessage],
                      high: dict[str, int], counts: Counter[str], *, use_cache: bool,
                      stale: set[str] | None = None,
                      changes: list[PendingChange] | None = None,
                      ) -> dict[EntityKey, EntityState]:
        """Run the rules on ``messages`` and store the result; returns the entities' states.
        ``stale``: tables whose cached states no longer hold (re-derived in this batch);
        ``changes``: gets the visible row changes, in the order of their last write."""
        before = self._load(conn, book, messages, use_cache, stale or set())
        states: dict[EntityKey, EntityState] = dict(before)
        dirty: dict[EntityKey, CrdtMessage] = {}  # -> the last write that changed it
        applied: list[Effect] = []
        for message in messages:
            key = (message.table, message.entity_id)
            effects, state = step(book, states.get(key, EMPTY), message)
            if not effects:
                continue
            applied.extend(effects)
            if isinstance(effects[0], Reject):
                if use_cache:  # a re-evaluation does not log every write again
                    log.info("rejected crdt message", extra=kv(
                        sender=message.sender, lamport=message.timestamp,
                        reason=effects[0].reason.value, detail=effects[0].detail))
                continue
            table = message.table
            if message.timestamp > high.get(table, -1):
                high[table] = message.timestamp
            states[key] = state
            dirty.pop(key, None)
            dirty[key] = message
        if use_cache:
            counts.update(count_effects(applied))
        if changes is not None:
            changes += changes_of(book, before, states, dirty)
        write_states(conn, before, {key: states[key] for key in dirty})
        return states

    def _load(self, conn: Connection, book: SchemaBook, messages: list[CrdtMessage],
              use_cache: bool, stale: set[str]) -> dict[EntityKey, EntityState]:
        """The state of every entity ``messages`` touch (EMPTY when none)."""
        # Unknown tables are rejected by the rules without looking at any state.
        keys = {(m.table, m.entity_id) for m in messages if m.table in book}
        cache = self._cache if use_cache else {}
        states = {key: cache[key] for key in keys if key in cache and key[0] not in stale}
        missing = keys - states.keys()
        if missing:
            loaded = load_states(conn, missing)
            for key in missing:
                states[key] = loaded.get(key, EMPTY)
        return states

    def has_legacy_writes(self, conn: Connection, table: str) -> bool:
        """Whether the log holds writes to ``table`` stored before schemas were on the log."""
        return has_legacy_writes(conn, self.section.channel, table)

    def _reevaluate(self, conn: Connection, book: SchemaBook, table: str, end: int,
                    high: dict[str, int], counts: Counter[str]) -> None:
        """Re-derive ``table`` from the log up to ``end`` against ``book``, a chunk at a time
        (the states of one chunk's entities in memory, the rest in SQL)."""
        clear_table(conn, table)
        high.pop(table, None)
        store_declarations(conn, table, book.declarations(table))
        counts["tables_reevaluated"] += 1
        if table not in book:
            return  # evicted: nothing of it counts any more
        # A worker thread, where trio's clock cannot be read: the progress log's pace is real time.
        began = last = time.monotonic()
        if end:
            log.info("re-deriving table from the log", extra=kv(table=table, up_to_seq=end))
        done = 0
        for position, chunk in log_of(conn, self.section.channel, table, end):
            writes = [m for m in chunk if isinstance(m, CrdtMessage)]
            counts["messages_reevaluated"] += len(writes)
            done += len(writes)
            self._apply_writes(conn, book, writes, high, counts, use_cache=False)
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                log.info("re-deriving table", extra=kv(
                    table=table, seq=position, up_to_seq=end, writes=done,
                    percent=round(100 * position / end)))
        if end:
            log.info("table re-derived", extra=kv(
                table=table, writes=done, seconds=round(time.monotonic() - began, 1)))
