"""The replicated database on the event log: the Spindexer CRDT as a log application.

Every CRDT message (``sync.crdt``) is the content of one event on the db channel; its timestamp
is the event's Lamport timestamp and its sender the event's peer id. :class:`DbApplication`
applies the committed events in storage order: it decodes a batch, loads the state of every
entity the batch touches with a few queries, runs the pure rules (``sync.crdt.step``) in memory
and writes the net change back (``storage.crdt.write_states``), in the transaction that also
advances its cursor. So the tables are a function of the log, and a new replica rebuilds them by
replaying it. Bad content is rejected and counted, never raised: it stays in the log.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

import trio
from google.protobuf.message import DecodeError
from sqlalchemy import Connection

from node.config import DbSection
from node.logs import kv
from node.metrics import Metrics
from storage import StoredEvent, get_state, put_state
from storage.crdt import EntityKey, count_held, evict_held, load_states, write_states
from sync.crdt import (
    EMPTY,
    CrdtMessage,
    Effect,
    EntityState,
    MempoolLimits,
    Reject,
    count_effects,
    decode_message,
    schemas_by_name,
    step,
)
from sync.errors import RemoteProtocolError
from sync.sds import sds_pb2

__all__ = ["APP_NAME", "METRICS", "DbApplication", "limits_of"]

log = logging.getLogger("syncnode.db")

APP_NAME = "db"
# Committed entity states kept in memory, so that a batch touching recently written entities
# does not read them back from SQL (applying is then mostly decoding and the rules).
CACHE_ENTITIES = 100_000
_HIGH_KEY = f"app/{APP_NAME}/high_timestamp"

# name -> help, all counters except the gauge; labelled ones carry a ``reason``.
METRICS = {
    "db_rejected_total": "CRDT messages rejected (reason: malformed, unknown_table, "
                         "unknown_column, bad_type, unauthorised_writer); they stay in the log",
    "db_mempool_dropped_total": "Held updates dropped (reason: dominated, evicted_cap, "
                                "evicted_age, evicted_lag); evictions break convergence",
    "db_cells_set_total": "Column registers that took a new winning write",
    "db_records_created_total": "Records created or re-created by an upsert",
    "db_records_deleted_total": "Visible records removed by a delete",
    "db_tombstones_total": "Deletes that advanced a record's tombstone",
    "db_upserts_noted_total": "Upserts that advanced the version of an existing record",
    "db_mempool_held_total": "Updates put in the mempool (their record had no upsert yet)",
    "db_mempool_released_total": "Held updates applied once their record's upsert arrived",
}


def limits_of(section: DbSection) -> MempoolLimits:
    return MempoolLimits(
        max_per_entity=section.mempool_max_per_entity,
        max_age_ms=round(section.mempool_max_age_s * 1000) or None,
        max_lag=section.mempool_max_lag or None,
    )


def _metric_of(count_name: str) -> tuple[str, str]:
    """(metric, reason label) of a ``count_effects`` key."""
    if count_name.startswith("rejected_"):
        return "db_rejected_total", count_name.removeprefix("rejected_")
    if count_name.startswith("mempool_dropped_"):
        return "db_mempool_dropped_total", count_name.removeprefix("mempool_dropped_")
    return f"db_{count_name}_total", ""


class DbApplication:
    """The :class:`node.apps.LogApplication` of the replicated database.

    ``apply`` runs in worker threads, one batch at a time; ``after_commit`` in the trio thread.
    Its few in-memory figures (mempool size, newest accepted timestamp, counts) are taken over
    only once the batch committed, so a failed and retried batch counts nothing twice.
    """

    def __init__(self, section: DbSection, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.name = APP_NAME
        self.section = section
        self.schemas = schemas_by_name(section.tables)
        # No table declared: no channel, so the runner never has anything to apply.
        self.channels: Sequence[str] = (section.channel,) if self.schemas else ()
        self.limits = limits_of(section)
        self.metrics = metrics
        self.clock = clock
        self.applied_seq = 0  # the last seq of the last committed batch
        self.mempool_size = 0
        self.high_timestamp = 0
        self._loaded = False
        self._changed = trio.Event()
        self._pending: tuple[int, int, Counter[str], dict[EntityKey, EntityState]] | None = None
        # Exactly what the tables hold for these entities (EMPTY: nothing); only ever updated
        # with states whose transaction committed.
        self._cache: dict[EntityKey, EntityState] = {}

    # -- LogApplication ---------------------------------------------------------------------

    def apply(self, conn: Connection, batch: Sequence[StoredEvent]) -> None:
        if not self._loaded:
            self.mempool_size = count_held(conn)
            raw = get_state(conn, _HIGH_KEY)
            self.high_timestamp = int(raw) if raw else 0
            self._loaded = True
        now_ms = int(self.clock() * 1000)
        counts: Counter[str] = Counter()
        size, high = self.mempool_size, self.high_timestamp
        if size:
            expired = self._expire(conn, now_ms, high, counts)
            if expired:
                self._cache.clear()  # the held updates of some cached states are gone
            size -= expired
        messages = self._decode(batch, counts)
        before = self._load(conn, messages)
        states: dict[EntityKey, EntityState] = dict(before)
        dirty: set[EntityKey] = set()
        applied: list[Effect] = []
        for message in messages:
            key = (message.table, message.entity_id)
            effects, state = step(self.schemas, states.get(key, EMPTY), message,
                                  limits=self.limits, now_ms=now_ms)
            if not effects:
                continue
            applied.extend(effects)
            if isinstance(effects[0], Reject):
                log.info("rejected crdt message", extra=kv(
                    sender=message.sender, lamport=message.timestamp,
                    reason=effects[0].reason.value, detail=effects[0].detail))
                continue
            high = max(high, message.timestamp)
            states[key] = state
            dirty.add(key)
        counts.update(count_effects(applied))
        written = {key: states[key] for key in dirty}
        size += write_states(conn, before, written)
        if high != self.high_timestamp:
            put_state(conn, _HIGH_KEY, str(high).encode(), now_ms)
        self._pending = (size, high, counts, {**before, **written})

    def after_commit(self, batch: Sequence[StoredEvent]) -> None:
        if self._pending is not None:
            self.mempool_size, self.high_timestamp, counts, states = self._pending
            self._pending = None
            cache = self._cache
            cache.update(states)
            if len(cache) > CACHE_ENTITIES:
                # Evict the entities not touched by this batch, oldest insertion first.
                for key in list(cache)[: len(cache) - CACHE_ENTITIES]:
                    if key not in states:
                        del cache[key]
            if self.metrics is not None:
                for name, amount in counts.items():
                    metric, reason = _metric_of(name)
                    labels = {"reason": reason} if reason else {}
                    self.metrics.inc(metric, amount, **labels)
        if batch:
            self.applied_seq = max(self.applied_seq, batch[-1].seq)
        self._changed.set()
        self._changed = trio.Event()

    def change_signal(self) -> trio.Event:
        """An event set after the next committed batch (call from the trio thread)."""
        return self._changed

    # -- internals ----------------------------------------------------------------------------

    def _load(self, conn: Connection, messages: list[CrdtMessage]) -> dict[EntityKey, EntityState]:
        """The committed state of every entity ``messages`` touch (EMPTY when none)."""
        # Unknown tables are rejected by the rules without looking at any state.
        keys = {(m.table, m.entity_id) for m in messages if m.table in self.schemas}
        cache = self._cache
        states = {key: cache[key] for key in keys if key in cache}
        missing = keys - states.keys()
        if missing:
            loaded = load_states(conn, missing)
            for key in missing:
                states[key] = loaded.get(key, EMPTY)
        return states

    def _decode(self, batch: Sequence[StoredEvent], counts: Counter[str]) -> list[CrdtMessage]:
        messages = []
        for event in batch:
            try:
                # Stored events were verified on arrival: only their content is needed here.
                content = sds_pb2.Message.FromString(event.wire).content
                messages.append(
                    decode_message(content, timestamp=event.lamport, sender=event.sender)
                )
            except (RemoteProtocolError, DecodeError) as exc:
                counts["rejected_malformed"] += 1
                detail = exc.reason if isinstance(exc, RemoteProtocolError) else "bad event"
                log.info("rejected crdt message", extra=kv(
                    sender=event.sender, seq=event.seq, reason="malformed", detail=detail))
        return messages

    def _expire(self, conn: Connection, now_ms: int, high: int, counts: Counter[str]) -> int:
        """Evict held updates past the age or lag limit; returns how many. Checked at each
        batch: a quiet node keeps them until the next db event, but the mempool cannot grow
        without events either."""
        limits = self.limits
        aged, lagged = evict_held(
            conn,
            held_before_ms=None if limits.max_age_ms is None else now_ms - limits.max_age_ms,
            lamport_below=None if limits.max_lag is None else high - limits.max_lag,
        )
        counts["mempool_dropped_evicted_age"] += aged
        counts["mempool_dropped_evicted_lag"] += lagged
        return aged + lagged
