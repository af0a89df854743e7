"""Block streams on the event log: the Cardinal consumer as a log application.

Every Cardinal message travels as one event on a blocks channel, wrapped in an envelope
(``sync.cardinal.envelope``). :class:`BlocksApplication` feeds the committed events of its
channels, in storage order, into a :class:`sync.cardinal.Consumer` and persists what it
reports (applied and reverted blocks, the head, the consumer's state) in the same transaction
that advances its cursor; so a restart resumes exactly where the last committed batch ended.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any

import trio
from sqlalchemy import Connection

from node.clock import Clock
from node.config.apps import BlocksSection
from node.config.channels import blocks_router as router_of
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import StoredEvent, get_state, put_state, read_channels_after
from storage.blocks import BlockRow, get_head, log_changes, put_head, set_canonical, store_blocks
from sync.cardinal import (
    BlockApplied,
    BlockFailed,
    BlockRef,
    BlockReverted,
    Consumer,
    ConsumerEvent,
    ReorgFinished,
    ReorgIgnored,
    ReorgStarted,
    decode_envelope,
    payload_to_json,
)
from sync.errors import RemoteProtocolError
from sync.sds import sds_pb2

__all__ = [
    "APP_NAME",
    "BlocksApplication",
    "router_of",
]

log = logging.getLogger("syncnode.blocks")

APP_NAME = "blocks"
# On a restart, the messages of blocks still being reassembled are fed again from the log; a
# partial block older than this many events is given up (its producers must publish it again).
MAX_REPLAY_EVENTS = 200_000
_STATE_KEY = f"app/{APP_NAME}/consumer"
_STATE_VERSION = 1



class BlocksApplication:
    """The :class:`node.apps.runner.LogApplication` of block streams.

    ``apply`` runs in worker threads, one batch at a time; ``after_commit`` in the trio thread.
    The in-memory consumer is trusted only while it matches the committed state: if a batch's
    transaction fails, the next batch first reloads it from the database.
    """

    def __init__(self, config: BlocksSection, metrics: Metrics | None = None, *,
                 clock: Clock) -> None:
        self.name = APP_NAME
        self.stream = config.channel
        self.router = router_of(config)
        self.channels: Sequence[str] = self.router.channels() if config.enabled else ()
        self.clock = clock  # wall(), read in the worker thread (node.clock's clocks allow it)
        self.producers = frozenset(config.producers)
        self._options: dict[str, Any] = {
            "tracked": list(config.tracked) or None,
            "reorg_threshold": config.reorg_threshold,
        }
        self.consumer: Consumer | None = None
        self._uncommitted = False
        self._replay_from = 0  # first seq the consumer's partial state may depend on
        self._fed_since = 0
        self._stored_head: BlockRef | None = None
        self.metrics = metrics
        # Counted in apply (a worker thread), published once the batch committed.
        self._counts: dict[tuple[str, str], int] = {}
        self._changed = trio.Event()
        # Writes of the batch, coalesced per block and flushed in a few statements.
        self._rows: dict[bytes, BlockRow] = {}
        self._flags: dict[bytes, bool] = {}
        self._changes: list[tuple[str, bytes, int]] = []

    # -- LogApplication ------------------------------------------------------------------------

    def restore(self, conn: Connection, cursor: int) -> None:
        pass  # the consumer is loaded with the first batch; the API reads the tables

    def apply(self, conn: Connection, batch: Sequence[StoredEvent]) -> None:
        if self.consumer is None or self._uncommitted:
            self._load(conn, batch[0].seq)
        self._uncommitted = True
        assert self.consumer is not None
        now_ms = int(self.clock.wall() * 1000)
        for event in batch:
            self._feed(event, now_ms)
        self._flush(conn, now_ms)
        head = self.consumer.head
        if head != self._stored_head and head.number >= 0:
            put_head(conn, self.stream, head.hash, head.number, head.weight, now_ms)
            self._stored_head = head
        state = {"version": _STATE_VERSION, "replay_from": self._replay_from,
                 "fed_since": self._fed_since, "consumer": self.consumer.export_state()}
        put_state(conn, _STATE_KEY, json.dumps(state, separators=(",", ":")).encode(), now_ms)

    def after_commit(self, batch: Sequence[StoredEvent]) -> None:
        self._uncommitted = False
        if self.metrics is not None:
            for (name, reason), n in self._counts.items():
                self.metrics.inc(name, n, **({"reason": reason} if reason else {}))
        self._counts.clear()
        self._changed.set()
        self._changed = trio.Event()

    # -- for the API ---------------------------------------------------------------------------

    def change_signal(self) -> trio.Event:
        """An event set after the next committed batch (call from the trio thread)."""
        return self._changed

    # -- internals -----------------------------------------------------------------------------

    def _count(self, name: str, label: str = "") -> None:
        key = (name, label)
        self._counts[key] = self._counts.get(key, 0) + 1

    def _load(self, conn: Connection, first_seq: int) -> None:
        """Rebuild the consumer from the committed state, then re-feed the log events its
        partly reassembled blocks were built from (those are not part of the saved state)."""
        self._counts.clear()
        self._rows.clear()
        self._flags.clear()
        self._changes.clear()
        raw = get_state(conn, _STATE_KEY)
        self.consumer, self._replay_from, self._fed_since = None, first_seq, 0
        if raw is not None:
            try:
                state = json.loads(raw)
                if state["version"] != _STATE_VERSION:
                    raise ValueError(f"unsupported state version {state['version']}")
                self.consumer = Consumer.restore(state["consumer"], **self._options)
                self._replay_from = int(state["replay_from"])
                self._fed_since = int(state["fed_since"])
            except (RemoteProtocolError, ValueError, KeyError, TypeError):
                # Never stop on a corrupt blob: resume from the stored head instead.
                log.exception("cannot restore the blocks consumer; restarting from the head")
        row = get_head(conn, self.stream)
        self._stored_head = None if row is None else BlockRef(row.hash, row.number, row.weight)
        if self.consumer is None:
            self.consumer = Consumer(anchor=self._stored_head, **self._options)
        cursor = self._replay_from - 1
        replayed = 0
        now_ms = int(self.clock.wall() * 1000)
        while cursor < first_seq - 1:
            rows = [e for e in read_channels_after(conn, self.channels, cursor, 2000)
                    if e.seq < first_seq]
            if not rows:
                break
            for event in rows:
                self._feed(event, now_ms)
            replayed += len(rows)
            cursor = rows[-1].seq
        self._flush(conn, now_ms)
        if replayed:
            log.info("blocks consumer resumed", extra=kv(replayed=replayed,
                                                         head=self.consumer.head.number))

    def _feed(self, event: StoredEvent, now_ms: int) -> None:
        consumer = self.consumer
        assert consumer is not None
        if event.sender not in self.producers:
            # Before any decoding: a non-producer's message (a Reorg above all) must not
            # move any consumer. Events stored before producers were configured end here too.
            self._count("blocks_rejected_total", "not a producer")
        else:
            self._receive(consumer, event)
        self._handle(consumer.events(), now_ms)
        if consumer.pending_count() == len(consumer.canonical_blocks()):
            self._replay_from, self._fed_since = event.seq + 1, 0
        else:
            self._fed_since += 1
            if self._fed_since > MAX_REPLAY_EVENTS:
                self._replay_from, self._fed_since = event.seq + 1, 0

    def _receive(self, consumer: Consumer, event: StoredEvent) -> None:
        try:
            content = _content_of(event.wire)
            envelope = decode_envelope(content, consumer.limits.max_key)
            # A reorg channel is in order per producer only: scope it to the sender, so that
            # a redundant producer's copy of the same reorg cannot close ours half-way.
            channel = (event.channel if envelope.reorg_channel is None
                       else f"{envelope.reorg_channel}@{event.sender}")
            consumer.receive(envelope.key, envelope.value, channel, event.sender)
        except RemoteProtocolError as exc:
            # The log is immutable: count bad content against its sender and go on.
            self._count("blocks_rejected_total", exc.kind.value)
            log.info("rejected block message", extra=kv(sender=event.sender, seq=event.seq,
                                                        reason=exc.reason))

    def _flush(self, conn: Connection, now_ms: int) -> None:
        store_blocks(conn, self.stream, list(self._rows.values()))
        for block_hash, canonical in self._flags.items():
            set_canonical(conn, self.stream, block_hash, canonical, now_ms)
        log_changes(conn, self.stream, self._changes, now_ms)
        self._rows.clear()
        self._flags.clear()
        self._changes.clear()

    def _handle(self, events: list[ConsumerEvent], now_ms: int) -> None:
        for ev in events:
            if isinstance(ev, BlockApplied):
                b = ev.block
                self._rows[b.hash] = BlockRow(b.hash, b.number, b.parent, b.weight, True,
                                              json.dumps(payload_to_json(b)), now_ms)
                self._flags.pop(b.hash, None)
                self._changes.append(("applied", b.hash, b.number))
                self._count("blocks_applied_total")
            elif isinstance(ev, BlockReverted):
                row = self._rows.get(ev.hash)
                if row is not None:
                    self._rows[ev.hash] = dataclasses.replace(row, canonical=False)
                else:
                    self._flags[ev.hash] = False
                self._changes.append(("reverted", ev.hash, ev.number))
                self._count("blocks_reverted_total")
            elif isinstance(ev, BlockFailed):
                self._count("blocks_failed_total", "after" if ev.after_completion else "before")
                log.warning("producers disagree about a block",
                            extra=kv(hash=ev.hash.hex(), reason=ev.reason,
                                     after_completion=ev.after_completion))
            elif isinstance(ev, ReorgStarted | ReorgFinished | ReorgIgnored):
                self._count("blocks_reorgs_total", type(ev).__name__)
                log.info("deep reorg", extra=kv(event=type(ev).__name__, hash=ev.hash.hex(),
                                                number=ev.number, channel=ev.channel))



def _content_of(wire: bytes) -> bytes:
    """The content of a stored event. Its id and signature were checked when it was stored, so
    only the protobuf is parsed (a full ``decode_event`` would hash it again)."""
    msg = sds_pb2.Message()
    try:
        msg.ParseFromString(wire)
    except Exception as exc:  # the C decoder's error types vary; all mean "bad bytes"
        raise RemoteProtocolError(f"undecodable event: {type(exc).__name__}") from None
    return msg.content
