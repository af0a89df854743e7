"""Recon over libp2p streams: reconcile event logs with peers, fetch what is missing.

The key store is a ``SummaryKeyStore`` over the events table: in memory only a bounded bucket
summary, updated after every commit, so it only ever counts keys of events that are durably
stored; saved with its watermark now and then, so start-up loads it and inserts only newer keys
(one index scan when there is no usable saved summary; docs/architecture.md "Recon key store").
Events fetched from a peer are validated (id, signature, size, and that we asked for them) by
the SDS channel before anything is stored.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence

import trio

from node.config import ReconSection
from node.logs import kv
from node.metrics import Metrics
from node.p2p import FramedStream, P2PError, P2PHost
from node.p2p.standing import PeerStanding
from node.replication.channels import ChannelService
from node.replication.ingest import IngestPool, IngestUnavailable
from node.replication.peer_activity import PeerActivity
from node.replication.recon_metrics import describe_recon_metrics
from node.replication.recon_phase import reconcile
from node.replication.recon_summary import SummarySaver, keystore_limits, open_keys
from node.replication.recon_transfer import SessionStats, Transfer
from node.replication.recon_work import KeyStoreWork
from node.replication.work import OverBudget, WorkGate
from node.store import EventStore
from storage import AppendResult, EventRecord, SqlKeySource
from sync.errors import RemoteProtocolError
from sync.peerscore import penalty_of
from sync.recon import PeerScheduler, SummaryKeyStore, node_interests
from sync.recon.session import PROTOCOL_ID, ReconConfig, ReconSession
from sync.transfer import (
    BUSY_FRAME,
    ClaimTable,
    RangeBacklog,
    ReconExchange,
)

__all__ = ["RECON_PROTOCOL", "ReconService"]

log = logging.getLogger("syncnode.recon")
RECON_PROTOCOL = PROTOCOL_ID  # the stream protocol id is the sans-IO session's
PENDING_GRACE_S = 30.0
# What ends a session early (the peer is backed off; a protocol error also costs standing).
FAILURES = (P2PError, trio.TooSlowError, RemoteProtocolError, IngestUnavailable, OverBudget)
MIN_ROUND_S = 1.0


class ReconService:
    def __init__(
        self,
        *,
        host: P2PHost,
        store: EventStore,
        channels: ChannelService,
        metrics: Metrics,
        network_id: int,
        section: ReconSection,
        config: ReconConfig,
        allowed_senders: frozenset[str] | None = None,
        standing: PeerStanding | None = None,
        ingest: IngestPool | None = None,
        rng: random.Random | None = None,
        work: WorkGate | None = None,
    ) -> None:
        self.host = host
        self.store = store
        self.channels = channels
        self.metrics = metrics
        self.network_id = network_id
        self.section = section
        self.session_timeout_s = section.session_timeout_s
        self.fetch_batch = section.fetch_batch
        self.max_missing_keys = section.max_missing_keys
        self.config = config
        load, max_buckets, cache_keys = keystore_limits(section)
        self.keys = SummaryKeyStore(SqlKeySource(store.engine), load=load,
                                    max_buckets=max_buckets, cache_keys=cache_keys)
        # Session work runs in one worker thread at a time, charged to the peer first.
        self.keywork = KeyStoreWork(self.keys)
        self.work = work
        self.saver = SummarySaver(store, metrics, section.summary_save_interval_s)
        # A closed group is only interested in its members' streams.
        members = allowed_senders | {channels.peer_id} if allowed_senders else None
        self.interests = node_interests(network_id, channels.names, members)
        # Sessions started by new events come at most every min_round_s: one sooner could not
        # fetch anything gossip is still delivering (cluster CPU: docs/cluster-bench.md).
        self.schedule = PeerScheduler(
            channels.peer_id, self.interests, rng or random.Random(),
            interval_s=section.interval_s, min_round_s=max(MIN_ROUND_S, section.gossip_grace_s),
            max_sessions=section.max_sessions)
        self._wake = trio.Event()
        self.activity = PeerActivity()  # each peer's last session, for peers/status/metrics
        self.standing = standing
        # Keys being fetched, and fetched keys handed to SDS but not committed yet: not
        # fetched again meanwhile, unless the claim lapses (the peer withholds them).
        self.claims = ClaimTable(section.claim_timeout_s, max_keys=4 * self.max_missing_keys,
                                 hold_s=PENDING_GRACE_S)
        # What a truncated session left, cut into ranges of a session's worth (linear catch-up).
        self.backlog = RangeBacklog()
        self.transfer = Transfer(
            store=store, channels=channels, metrics=metrics, network_id=network_id,
            fetch_batch=self.fetch_batch, claims=self.claims, standing=standing,
            max_frame_bytes=host.config.max_frame_bytes,
            serve_batch_bytes=section.serve_batch_bytes, work=work,
            gossip_grace_ms=int(section.gossip_grace_s * 1000), on_released=self.poke,
            event_id_layout=section.event_id_layout, profiles=channels.profiles, ingest=ingest,
        )
        host.set_stream_handler(RECON_PROTOCOL, self._respond)
        store.on_commit(self._on_commit)
        # Fetched events in the store's queue stay claimed until their commit, however slow.
        store.on_queued(lambda records: self.claims.queued(r.recon_key for r in records))
        describe_recon_metrics(metrics, lambda: self.claims, lambda: self.keys,
                               lambda: self.backlog)

    async def load(self) -> None:
        """Open the key store: the saved summary plus newer keys, else one scan of the key
        index (``recon_summary.open_keys``); memory bounded either way."""
        opened = await open_keys(self.store, self.section)
        self.keys = self.keywork.keys = opened.store
        self.saver.opened(opened)

    async def save_summary(self) -> bool:
        """Save the key store's summary now (at clean shutdown, after the last commit)."""
        return await self.saver.save(self.keys, self.keywork.try_locked)

    def _on_commit(self, result: AppendResult, records: Sequence[EventRecord]) -> None:
        # Every record the store was given ends its claim's hold here: stored, a duplicate,
        # or not stored at all (then it may be fetched again).
        new = {m for _, m in result.inserted}
        fetched = 0
        stored: list[bytes] = []
        for record in records:
            held = self.claims.committed(record.recon_key)
            if record.message_id in new:
                stored.append(record.recon_key)
                fetched += held
        if not stored:
            return
        self.keywork.insert_many(stored)
        self.saver.committed(result)
        # Fetched vs stored: each event should be fetched once (docs/cluster-bench.md).
        self.metrics.inc("recon_events_stored_total", fetched)
        # CIP-124: a new event is announced by reconciling with a random peer soon.
        self.poke()

    def poke(self) -> None:
        """Reconcile soon (e.g. after a new peer connected or a gap was seen)."""
        self.schedule.poke()
        self._wake.set()

    # -- initiating ----------------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_peers)
            if self.saver.interval_s > 0:
                nursery.start_soon(self.saver.run, lambda: self.keys, self.keywork.try_locked)
            while True:
                now = time.monotonic()
                if now >= self.claims.get_timer():
                    self.transfer.handle_claims_timer(now)
                if now >= self.schedule.get_timer():
                    peer = self.schedule.handle_timer(now, self.host.connected_peers(),
                                                      self._latency)
                    if peer is not None:
                        nursery.start_soon(self.sync_with, peer)
                    continue
                self._wake = trio.Event()
                next_at = min(self.schedule.get_timer(), self.claims.get_timer())
                with trio.move_on_after(next_at - now):
                    await self._wake.wait()

    def _latency(self, peer: str) -> float | None:
        info = self.host.peer_info(peer)
        return info.latency_s if info is not None else None

    async def _watch_peers(self) -> None:
        async for event in self.host.peer_events():
            if event.kind == "disconnected":
                self.schedule.disconnected(event.peer_id, time.monotonic())
            if event.kind == "connected":
                self.schedule.connected(event.peer_id, self.host.connected_peers(),
                                        time.monotonic())
                self._wake.set()

    async def sync_with(self, peer: str) -> SessionStats | None:
        """Sessions with ``peer`` while a long catch-up has more to do: each next one at once
        instead of after the next round (each round would add its wait to the catch-up)."""
        while True:
            stats = await self._sync_once(peer)
            if stats is None or not stats.more:
                return stats

    async def _sync_once(self, peer: str) -> SessionStats | None:
        if not self.schedule.begin_initiator(peer):
            return None
        stats = SessionStats()
        started = time.monotonic()
        exchange = None
        try:
            async with await self.host.open_stream(peer, RECON_PROTOCOL) as stream:
                exchange = self._exchange(ReconSession.initiator, peer)
                first = await self.keywork.run(exchange.start)
                await self._reconcile(stream, exchange, stats, first=first)
                if exchange.declined:
                    self.backlog.give_back(exchange.scope)
                    self.metrics.inc("recon_sessions_declined_total", role="initiator")
                    return None
                # The transfer phases have no overall deadline (a large catch-up takes as long
                # as it takes): their work is bounded by what was reconciled, every read has a
                # timeout, and a stalled batch ends the session.
                await self._fetch(stream, stats)
                await self._serve(stream, stats)
        except FAILURES as exc:
            self.backlog.give_back(exchange.scope if exchange is not None else None)
            self._failed(peer, exc)
            return None
        finally:
            self.schedule.end(peer, initiator=True)
        self.schedule.succeeded(peer)
        self._done("initiator", started, peer, stats)
        if stats.fetched:
            log.info("recon fetched events", extra=kv(
                peer=peer, events=stats.fetched, seconds=round(time.monotonic() - started, 3)))
        self._finished(exchange, stats)
        return stats

    def _finished(self, exchange: ReconExchange, stats: SessionStats) -> None:
        """Cut what a truncated session left into the backlog; is there more to do at once?"""
        self.backlog.finished(exchange.scope, self.interests, truncated=exchange.truncated,
                              lowest_dropped=exchange.lowest_dropped, cuts=exchange.cuts)
        # Each step either fetched something or used up a backlog range: it ends.
        stats.more = (stats.truncated and stats.fetched > 0) or (
            exchange.scope is not None and len(self.backlog) > 0)

    def _done(self, role: str, started: float, peer: str, stats: SessionStats) -> None:
        self.activity.session(peer, role, "ok", stats.fetched, stats.served)
        self.metrics.inc("recon_sessions_total", role=role)
        self.metrics.observe("recon_session_seconds", time.monotonic() - started, role=role)

    def _failed(self, peer: str, exc: Exception, role: str = "initiator") -> None:
        if isinstance(exc, RemoteProtocolError):
            self.metrics.inc("recon_protocol_errors_total", reason=exc.kind.value)
            if self.standing is not None:
                self.standing.penalise(peer, penalty_of(exc.kind), float(exc.count))
        self.schedule.failed(peer, time.monotonic())
        self.activity.session(peer, role, type(exc).__name__)
        self.metrics.inc("recon_errors_total", kind=type(exc).__name__)
        log.info("recon session failed", extra=kv(peer=peer, error=str(exc) or type(exc).__name__))

    # -- responding ----------------------------------------------------------------------------

    async def _respond(self, stream: FramedStream) -> None:
        peer = stream.peer_id
        stats = SessionStats()
        if not self.schedule.begin_responder(peer):
            async with stream:
                with trio.move_on_after(self.session_timeout_s):
                    await stream.send(BUSY_FRAME)
            self.metrics.inc("recon_sessions_declined_total", role="responder")
            return
        started = time.monotonic()
        exchange = None
        try:
            async with stream:
                exchange = self._exchange(ReconSession.responder, peer)
                await self._reconcile(stream, exchange, stats)
                await self._serve(stream, stats)
                await self._fetch(stream, stats)
        except FAILURES as exc:
            self.backlog.give_back(exchange.scope if exchange is not None else None)
            self._failed(peer, exc, "responder")
            return
        finally:
            self.schedule.end(peer, initiator=False)
        self._done("responder", started, peer, stats)
        self._finished(exchange, stats)
        if stats.more:
            await self.sync_with(peer)  # more to fetch: at once (see sync_with)

    # -- shared phases ---------------------------------------------------------------------------

    def _exchange(self, make: Callable[..., ReconSession], peer: str) -> ReconExchange:
        interests, scope = self.backlog.take(self.interests)
        session = make(self.keys, interests, self.config, peer=peer)
        # trio's clock: the exchange's timer is then a cancel scope's deadline as it is.
        return ReconExchange(session, self.max_missing_keys, peer, scope=scope,
                             timeout_s=self.session_timeout_s, started=trio.current_time())

    async def _reconcile(self, stream: FramedStream, exchange: ReconExchange,
                         stats: SessionStats, first: bytes | None = None) -> None:
        charge = self.work.charger(stream.peer_id, "recon") if self.work else None
        await reconcile(stream, exchange, first,
                        lambda n: self.metrics.inc("recon_missing_dropped_total", n),
                        work=self.keywork.run, charge=charge)
        stats.missing = exchange.missing
        stats.truncated = exchange.truncated
        if not exchange.declined:
            self.schedule.learned(stream.peer_id, exchange.session.peer_interests)

    async def _fetch(self, stream: FramedStream, stats: SessionStats) -> None:
        await self.transfer.fetch(stream, stats)

    async def _serve(self, stream: FramedStream, stats: SessionStats) -> None:
        # A peer cannot want more than we hold (plus one batch of slack for races).
        await self.transfer.serve(stream, len(self.keys) + self.fetch_batch, stats)
