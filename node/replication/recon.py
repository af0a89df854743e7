"""Recon over libp2p streams: reconcile event logs with peers, fetch what is missing.

The key store is a ``SummaryKeyStore`` over the events table: in memory only a bounded bucket
summary, updated after every commit, so it only ever counts keys of events that are durably
stored; saved with its watermark now and then, so start-up loads it and inserts only newer keys
(one index scan when there is no usable saved summary; docs/architecture.md "Recon key store").
Events fetched from a peer are validated (id, signature, size, and that we asked for them) by
the SDS channel before anything is stored.

Every rule of the session lifecycle (when the next session starts and with whom, backoff, the
backlog range a session owns and gives back when it fails, which side fetches first, whether
another follows at once, claims, penalties) is the sans-IO ``sync.replication.ReconLifecycle``'s;
``ReplicationDriver`` drives it (its timer, connections, commits in; actions out); this module
opens the streams and runs the sessions it starts (``recon_session``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import trio

from node.config.settings import ReconSection
from node.p2p import P2PHost
from node.replication.channels import ChannelService
from node.replication.clock import Clock
from node.replication.driver import ReplicationDriver
from node.replication.fetch import Fetcher
from node.replication.ingest import IngestPool
from node.replication.peer_activity import PeerActivity
from node.replication.recon_metrics import describe_recon_metrics
from node.replication.recon_session import RECON_PROTOCOL, SessionRunner
from node.replication.recon_summary import SummarySaver
from node.replication.recon_transfer import Transfer
from node.replication.recon_work import KeyStoreWork
from node.replication.sync_status import SyncStatus
from node.replication.work import WorkGate
from node.store.events import EventStore
from node.store.reports import Committed
from node.telemetry.metrics import Metrics
from storage import OpenedKeyStore, SqlKeyReader
from sync.recon import PeerScheduler, SummaryKeyStore, node_interests
from sync.recon.peers import Range
from sync.replication import LifecycleConfig, ReconLifecycle
from sync.transfer import ClaimTable, RangeBacklog

__all__ = ["RECON_PROTOCOL", "ReconService", "recon_interests", "recon_lifecycle"]

log = logging.getLogger("syncnode.recon")


def recon_interests(network_id: int, channels: Sequence[str], peer_id: str,
                    allowed_senders: frozenset[str] | None) -> list[Range]:
    """What the node reconciles: its channels' streams; a closed group only its members'."""
    members = allowed_senders | {peer_id} if allowed_senders else None
    return node_interests(network_id, channels, members)


def recon_lifecycle(peer_id: str, interests: Sequence[Range], section: ReconSection,
                    rng: random.Random) -> ReconLifecycle:
    """The Recon lifecycle core on the node's settings (``[recon]``)."""
    return ReconLifecycle(peer_id, interests, rng, LifecycleConfig.of(
        interval_s=section.interval_s, gossip_grace_s=section.gossip_grace_s,
        max_sessions=section.max_sessions, claim_timeout_s=section.claim_timeout_s,
        max_missing_keys=section.max_missing_keys, prompt_min_s=section.prompt_interval_s))


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
        driver: ReplicationDriver,
        clock: Clock,
        keys: OpenedKeyStore,
        fetcher: Fetcher,
        ingest: IngestPool | None = None,
        work: WorkGate | None = None,
    ) -> None:
        """``keys``: the key store as ``recon_summary.open_keys`` loaded it (``build_parts``
        opens it first: the driver's core builds every session's reconciliation on it, and the
        service keeps it current and saved). ``work``: what each frame costs its peer, which a
        core set up to charge (``ExchangeSetup.charging``) requires. ``fetcher``:
        what runs the fetches by id the core's timer makes due (this service runs the
        driver's one timer loop)."""
        self.host = host
        self.clock = clock
        self.store = store
        self.metrics = metrics
        self.section = section
        self.keys: SummaryKeyStore = keys.store
        # Session work runs in one worker thread at a time, charged to the peer first; it
        # answers the key store's reads from the events table.
        self.keywork = KeyStoreWork(self.keys, SqlKeyReader(store.engine))
        self.saver = SummarySaver(store, metrics, section.summary_save_interval_s, self.clock,
                                  keys)
        self.driver = driver
        self.fetcher = fetcher
        self.core = driver.core.sessions
        # Each peer's last session, for peers/status/metrics.
        self.activity = PeerActivity(clock=self.clock)
        self.sync = SyncStatus(metrics, self.clock, host.connected_peers)
        self.transfer = Transfer(
            store=store, channels=channels, metrics=metrics, network_id=network_id,
            fetch_batch=section.fetch_batch, driver=driver,
            max_frame_bytes=host.config.max_frame_bytes,
            serve_batch_bytes=section.serve_batch_bytes, work=work, clock=self.clock,
            event_id_layout=section.event_id_layout, profiles=channels.profiles, ingest=ingest,
        )
        self.sessions = SessionRunner(
            host=host, driver=driver, keywork=self.keywork, transfer=self.transfer,
            activity=self.activity, sync=self.sync, metrics=metrics, section=section,
            clock=clock, work=work)
        host.set_stream_handler(RECON_PROTOCOL, self.sessions.respond)
        self.channels = channels
        describe_recon_metrics(metrics, lambda: self.claims, lambda: self.keys,
                               lambda: self.backlog, driver.core.sessions_open)

    # The core's parts, by their old names (metrics, membership, the API read them).
    @property
    def schedule(self) -> PeerScheduler:
        return self.core.schedule

    @property
    def claims(self) -> ClaimTable:
        return self.core.claims

    @property
    def backlog(self) -> RangeBacklog:
        return self.core.backlog

    async def save_summary(self) -> bool:
        """Save the key store's summary now (at clean shutdown, after the last commit: its
        report is taken first)."""
        self.driver.drain_reports(self.committed, self.channels.undeliver)
        return await self.saver.save(self.keys, self.keywork.try_locked)

    def committed(self, report: Committed) -> None:
        """The store committed a batch (its report, read by the driver): the claims end,
        the new keys enter the key store and the sync estimate."""
        result = report.result
        stored, fetched = self.driver.committed(result, report.records)
        self.sync.stored(result)
        if not stored:
            return
        # Commits before the key store was loaded are in it already (its watermark).
        if max(seq for seq, _ in result.inserted) <= self.saver.watermark:
            return
        self.keywork.insert_many(stored)
        self.saver.committed(result)
        # Fetched vs stored: each event should be fetched once (docs/bench/cluster.md).
        self.metrics.inc("recon_events_stored_total", fetched)

    def poke(self) -> None:
        """Reconcile soon (e.g. after a new peer connected or a gap was seen)."""
        self.driver.poke()

    # -- initiating ----------------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_peers)
            nursery.start_soon(self.driver.store_reports, self.committed,
                               self.channels.undeliver)
            if self.saver.interval_s > 0:
                nursery.start_soon(self.saver.run, self.keys, self.keywork.try_locked)
            await self.driver.rounds(self._session, self.fetcher.fetch,
                                     self.channels.is_missing)

    async def _session(self, peer: str) -> None:
        try:
            await self.sessions.sync_with(peer)
        finally:  # a prompt that waited for this session's end may start now
            self.driver.wake()

    async def _watch_peers(self) -> None:
        async for event in self.host.peer_events():
            if event.kind == "disconnected":
                self.driver.disconnected(event.peer_id)
            if event.kind == "connected":
                self.driver.connected(event.peer_id, inbound=event.direction == "inbound")
