"""Fetch events by message id (``/syncnode/fetch/1.0.0``) to close SDS gaps in seconds.

The protocol (request format, answer checks) is :mod:`sync.transfer.fetch`; when to fetch, whom
to ask and what is left to Recon is the replication core's (:class:`sync.replication.GapPlanner`
in ``ReplicationCore``), driven by ``ReplicationDriver`` (its timer makes a fetch due, gaps in,
actions out); this runs the requests it plans (:meth:`Fetcher.fetch`) and serves those of
peers.
Answers are read from the database in byte-bounded batches and sent as they are read, and each
peer has at most ``max_streams_per_peer`` requests served at once, so requests that are never
read cannot make the node hold their events. Everything fetched goes through
``FetchedIngest.ingest`` (the one ingest path), which verifies id and signature before
anything is stored.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable

from node.config.settings import FetchSection
from node.p2p import FramedStream, P2PError, P2PHost
from node.p2p.standing import PeerStanding
from node.replication.driver import ReplicationDriver
from node.replication.verify import MAX_EVENT_BYTES
from node.replication.work import OverBudget, WorkGate
from node.store.events import EventStore
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import events_by_message_ids, wire_sizes_by_message_ids
from sync.errors import RemoteProtocolError
from sync.peerscore import penalty_of
from sync.replication import FETCH_GRACE_S, FetchPlan, GapPlanner
from sync.transfer import (
    REFUSED_PENALTY,
    FetchReader,
    InFlight,
    byte_batches,
    encode_request,
    parse_request,
)
from sync.workbudget import fetch_units

__all__ = ["FETCH_PROTOCOL", "MAX_IDS", "Fetcher", "gap_planner"]

log = logging.getLogger("syncnode.fetch")
FETCH_PROTOCOL = "/syncnode/fetch/1.0.0"
MAX_IDS = 256
PEERS_PER_ID = 3
GRACE_S = FETCH_GRACE_S


def gap_planner(limits: FetchSection, rng: random.Random, grace_s: float = GRACE_S
                ) -> GapPlanner:
    """The fetch-by-id core on the node's settings (``[fetch]``)."""
    return GapPlanner(grace_s, min(limits.max_ids, MAX_IDS), rng, PEERS_PER_ID)


class Fetcher:
    """Serves fetch requests and fetches the dependencies SDS reports missing."""

    def __init__(
        self,
        host: P2PHost,
        store: EventStore,
        metrics: Metrics,
        ingest: Callable[[bytes, str | None], Awaitable[str | None]],
        driver: ReplicationDriver,
        limits: FetchSection,
        standing: PeerStanding | None = None,
        work: WorkGate | None = None,
    ) -> None:
        self.host = host
        self.store = store
        self.metrics = metrics
        self.ingest = ingest
        self.driver = driver
        self.core = driver.core.gaps
        self.standing = standing
        self.work = work
        self.limits = limits
        self.max_ids = min(self.limits.max_ids, MAX_IDS)
        self._serving = InFlight(self.limits.max_streams_per_peer,
                                 max(self.limits.max_streams, self.limits.max_streams_per_peer))
        host.set_stream_handler(FETCH_PROTOCOL, self._serve)
        for name, text in (
            ("fetch_bad_requests_total", "Malformed fetch requests"),
            ("fetch_refused_total", "Fetch streams refused: over the per-peer or total cap"),
            ("fetch_bad_answers_total", "Fetch answers that broke the protocol"),
        ):
            metrics.describe(name, "counter", text)
            metrics.inc(name, 0)

    def _penalise(self, peer: str, reason: str) -> None:
        if self.standing is not None:
            self.standing.penalise(peer, reason)

    async def _serve(self, stream: FramedStream) -> None:
        peer = stream.peer_id
        if not self._serving.acquire(peer):
            self.metrics.inc("fetch_refused_total")
            self._penalise(peer, REFUSED_PENALTY)
            await stream.reset()
            return
        try:
            async with stream:
                await self._answer(stream)
        finally:
            self._serving.release(peer)

    async def _answer(self, stream: FramedStream) -> None:
        try:
            ids = parse_request(await stream.receive(), self.max_ids, stream.peer_id)
        except RemoteProtocolError as exc:
            self.metrics.inc("fetch_bad_requests_total")
            self._penalise(stream.peer_id, penalty_of(exc.kind))
            log.info("bad fetch request", extra=kv(peer=stream.peer_id, error=exc.reason))
            return
        if self.work is not None:
            try:
                await self.work.charge(stream.peer_id, "fetch", fetch_units(len(ids)))
            except OverBudget:
                return  # counted and, if the peer's own budget is spent, penalised
        sizes = await self.store.read(wire_sizes_by_message_ids, ids) if ids else []
        served = 0
        # Read and send a bounded batch at a time: a peer that never reads its answer holds
        # one batch of ours, not every event it asked for.
        for batch in byte_batches(sizes, self.limits.serve_batch_bytes, len(ids)):
            found = await self.store.read(events_by_message_ids, batch)
            for event in found:
                await stream.send(event.wire)
            served += len(found)
            del found
        await stream.send(b"")
        self.metrics.inc("fetch_served_total", served)

    async def fetch(self, plan: FetchPlan) -> None:
        """Ask the plan's peers in turn for what it still wants (the driver's loop makes each
        fetch due: ``ReplicationDriver.rounds``)."""
        for peer in plan.peers:
            if not plan.ids:
                return
            try:
                got = await self._request(peer, sorted(plan.ids))
            except P2PError as exc:
                self.metrics.inc("fetch_failures_total")
                log.debug("fetch failed", extra=kv(peer=peer, error=str(exc)))
                continue
            except RemoteProtocolError as exc:
                self.metrics.inc("fetch_bad_answers_total")
                self.driver.carry_out(self.core.bad_answer(peer, exc))
                log.info("bad fetch answer", extra=kv(peer=peer, error=exc.reason))
                continue
            for wire in got:
                accepted = await self.ingest(wire, peer)
                if accepted is not None:
                    self.metrics.inc("fetch_received_total")
                    self.core.received(plan, accepted)

    async def _request(self, peer: str, ids: list[str]) -> list[bytes]:
        out: list[bytes] = []
        reader = FetchReader(ids, MAX_EVENT_BYTES, peer)
        async with await self.host.open_stream(peer, FETCH_PROTOCOL) as stream:
            await stream.send(encode_request(ids))
            while (wire := reader.receive(await stream.receive())) is not None:
                out.append(wire)
        return out
