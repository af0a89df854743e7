"""One Recon session over a libp2p stream: begin it with the replication core (which builds and
holds its reconciliation), reconcile (``recon_phase``: frames and reads go to the core), run the
transfer phases in the order the core says, and report the end (``finished`` or ``failed``)
back to the core; what the core returns goes to the one driver
(``ReplicationDriver.carry_out``). ``ReconService`` holds one :class:`SessionRunner`, which the
driver's Recon loop starts sessions on and the stream handler answers peers' sessions with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from node.config.settings import ReconSection
from node.p2p import FramedStream, P2PError, P2PHost
from node.replication.clock import Clock
from node.replication.driver import ReplicationDriver
from node.replication.ingest import IngestUnavailable
from node.replication.peer_activity import PeerActivity
from node.replication.recon_phase import reconcile
from node.replication.recon_transfer import SessionStats, Transfer
from node.replication.recon_work import KeyStoreWork
from node.replication.sync_status import SyncStatus
from node.replication.work import OverBudget, WorkGate
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.errors import RemoteProtocolError
from sync.recon.session import PROTOCOL_ID
from sync.replication import (
    Reconciled,
    ReconLifecycle,
    ReplicationCore,
    Role,
    SessionPlan,
)
from sync.transfer import BUSY_FRAME

__all__ = ["FAILURES", "RECON_PROTOCOL", "SessionRunner"]

log = logging.getLogger("syncnode.recon")
RECON_PROTOCOL = PROTOCOL_ID  # the stream protocol id is the sans-IO session's
# What ends a session early (the peer is backed off; a protocol error also costs standing).
FAILURES = (P2PError, trio.TooSlowError, RemoteProtocolError, IngestUnavailable, OverBudget)


@dataclass(kw_only=True)
class SessionRunner:
    host: P2PHost
    driver: ReplicationDriver
    keywork: KeyStoreWork
    transfer: Transfer
    activity: PeerActivity
    sync: SyncStatus
    metrics: Metrics
    section: ReconSection
    clock: Clock
    work: WorkGate | None = None

    @property
    def core(self) -> ReplicationCore:
        return self.driver.core

    async def sync_with(self, peer: str) -> SessionStats | None:
        """Sessions with ``peer`` while a long catch-up has more to do: each next one at once
        instead of after the next round (each round would add its wait to the catch-up)."""
        while True:
            stats = await self._sync_once(peer)
            if stats is None or not stats.more:
                return stats

    async def _sync_once(self, peer: str) -> SessionStats | None:
        plan = self.core.begin(peer, Role.INITIATOR, self.clock.now())
        if plan is None:
            return None
        stats = SessionStats()
        try:
            async with await self.host.open_stream(peer, RECON_PROTOCOL) as stream:
                if not await self._reconcile(stream, plan):
                    self.core.declined(plan)
                    self.metrics.inc("recon_sessions_declined_total", role="initiator")
                    return None
                # The transfer phases have no overall deadline (a large catch-up takes as long
                # as it takes): their work is bounded by what was reconciled, every read has a
                # timeout, and a stalled batch ends the session.
                await self._phases(stream, plan, stats)
        except FAILURES as exc:
            self._failed(plan, peer, Role.INITIATOR, exc, stats)
            return None
        except BaseException:  # cancelled (shutdown): the core must not keep the pair busy
            self.core.abandoned(plan)
            raise
        self._done(plan, stats)
        self._finished(plan, stats)
        return stats

    async def _phases(self, stream: FramedStream, plan: SessionPlan,
                      stats: SessionStats) -> None:
        """The transfer phases, in the order the core says (``SessionPlan.fetch_first``)."""
        if plan.fetch_first:
            await self.transfer.fetch(stream, plan, stats)
            await self._serve(stream, stats)
        else:
            await self._serve(stream, stats)
            await self.transfer.fetch(stream, plan, stats)

    def _finished(self, plan: SessionPlan, stats: SessionStats) -> None:
        plan.fetched = stats.fetched
        stats.more = self.core.finished(plan)

    def _done(self, plan: SessionPlan, stats: SessionStats) -> None:
        role = plan.role.value
        seconds = self.clock.now() - plan.started
        self.activity.session(plan.peer, role, "ok", stats.fetched, stats.served)
        self.metrics.inc("recon_sessions_total", role=role)
        self.metrics.observe("recon_session_seconds", seconds, role=role)
        self._log_fetched(plan, stats)

    def _log_fetched(self, plan: SessionPlan, stats: SessionStats) -> None:
        """One line per session that fetched (either side fetches; a failed session keeps
        what it stored before it failed). Its wall-clock span, in epoch ms like an event's
        ``received_at``, times a catch-up by the sessions that did the work: the events are
        handed to the store before the session ends and committed soon after
        (tests/harness/catchup_timing.py reads these lines)."""
        if not stats.fetched:
            return
        seconds = self.clock.now() - plan.started
        ended = self.clock.wall()
        log.info("recon fetched events", extra=kv(
            peer=plan.peer, role=plan.role.value, events=stats.fetched,
            started_ms=round((ended - seconds) * 1000), ended_ms=round(ended * 1000),
            seconds=round(seconds, 3)))

    def _failed(self, plan: SessionPlan, peer: str, role: Role, exc: Exception,
                stats: SessionStats) -> None:
        self._log_fetched(plan, stats)
        self.driver.carry_out(self.core.failed(plan, peer, role, exc, self.clock.now()))
        self.activity.session(peer, role.value, type(exc).__name__)
        self.metrics.inc("recon_errors_total", kind=type(exc).__name__)
        log.info("recon session failed", extra=kv(peer=peer, error=str(exc) or type(exc).__name__))

    # -- responding ----------------------------------------------------------------------------

    async def respond(self, stream: FramedStream) -> None:
        peer = stream.peer_id
        stats = SessionStats()
        plan = self.core.begin(peer, Role.RESPONDER, self.clock.now())
        if plan is None:
            async with stream:
                with trio.move_on_after(self.section.session_timeout_s):
                    await stream.send(BUSY_FRAME)
            self.metrics.inc("recon_sessions_declined_total", role="responder")
            return
        try:
            async with stream:
                await self._reconcile(stream, plan)
                await self._phases(stream, plan, stats)
        except FAILURES as exc:
            self._failed(plan, peer, Role.RESPONDER, exc, stats)
            return
        except BaseException:  # cancelled (shutdown): the core must not keep the pair busy
            self.core.abandoned(plan)
            raise
        self._done(plan, stats)
        self._finished(plan, stats)
        if stats.more:
            await self.sync_with(peer)  # more to fetch: at once (see sync_with)

    # -- shared phases ---------------------------------------------------------------------------

    async def _reconcile(self, stream: FramedStream, plan: SessionPlan) -> bool:
        """The reconciliation phase; False: the peer declined (BUSY)."""
        work = self.work
        ended = await reconcile(
            stream, self.core, plan,
            lambda n: self.metrics.inc("recon_missing_dropped_total", n),
            work=self.keywork.step,
            charges=work.frames(stream.peer_id, "recon") if work else None,
            now=self.clock.now)
        if not isinstance(ended, Reconciled):
            return False
        self.core.reconciled(plan)
        # All the peer holds that we lack: the keys kept and those beyond the bound.
        self.sync.reconciled(plan.peer, ended.missing + ended.dropped,
                             partial=plan.scope is not None)
        return True

    async def _serve(self, stream: FramedStream, stats: SessionStats) -> None:
        await self.transfer.serve(stream, ReconLifecycle.serve_budget(
            len(self.keywork.keys), self.section.fetch_batch), stats)
