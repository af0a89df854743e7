"""The WANT/EVENTS phase of a Recon session over a libp2p stream: glue around
:mod:`sync.transfer` (read a frame, call the core, write what it says).

Fetching: what to fetch, the claims and what a short answer costs are the lifecycle core's
(``sync.replication.ReconLifecycle``: ``want``, ``stored``, ``delivered``, ``answer_done``),
fed and carried out by the one driver (``ReplicationDriver``: ``claim`` answers the core's
``ReadStored``);
the WANT/EVENTS state machine is ``sync.transfer.WantFetcher``. Batches are verified in worker
processes or threads (a driver choice: both produce a ``sync.ingest.VerifiedBatch``) and take
the one ingest path (``sync.replication.screen`` then ``FetchedIngest.ingest_verified``).

Serving: ``recon_serve.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from node.p2p import FramedStream, P2PError
from node.replication.channels import ChannelService
from node.replication.clock import Clock
from node.replication.driver import ReplicationDriver
from node.replication.ingest import IngestPool, IngestUnavailable
from node.replication.recon_serve import serve_wants
from node.replication.verify import MAX_EVENT_BYTES, MIN_THREADED, PendingBatch, verify_batch
from node.replication.work import WorkGate
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from sync.errors import RemoteProtocolError
from sync.ingest import IngestSpec, VerifiedBatch
from sync.recon.eventid import CIP124_DRAFT
from sync.replication import SessionPlan, screen
from sync.transfer import WantFetcher

__all__ = ["SessionStats", "Transfer"]

log = logging.getLogger("syncnode.recon")
# Want lists in flight during a fetch: the peer prepares the next while we ingest one.
FETCH_AHEAD = 4
# The first want list's size; the next ones double up to ``recon.fetch_batch``. A small first
# answer is verified at once on this thread (``verify_batch``) and ingested while the peer
# reads the next: a catch-up of a few hundred events otherwise waited for one whole batch to
# be read, sent and verified first.
FIRST_WANT = MIN_THREADED // 2
# A fetch asks for more only while fewer events than this wait for their commit: a fast
# fetch in front of a slow store (PostgreSQL, a busy disk) would otherwise hold up to a whole
# session's events (100,000, ~1.2 KB each) in the store's queue, and memory with them.
STORE_BACKLOG_EVENTS = 20_000


@dataclass
class SessionStats:
    fetched: int = 0
    served: int = 0
    rejected: int = 0
    withheld: int = 0
    #: A long catch-up has more to do: the next session at once.
    more: bool = False


_Batch = tuple[list[bytes], PendingBatch, bool]


class Transfer:
    def __init__(
        self,
        *,
        store: EventStore,
        channels: ChannelService,
        metrics: Metrics,
        network_id: int,
        fetch_batch: int,
        driver: ReplicationDriver,
        max_frame_bytes: int,
        serve_batch_bytes: int,
        clock: Clock,
        event_id_layout: str = CIP124_DRAFT,
        profiles: Mapping[str, str] | None = None,
        ingest: IngestPool | None = None,
        work: WorkGate | None = None,
    ) -> None:
        self.store = store
        self.work = work
        # Worker processes verifying fetched batches; without them, threads in the daemon.
        self.ingest = ingest
        self.channels = channels
        self.metrics = metrics
        self.fetch_batch = fetch_batch
        self.driver = driver
        self.core = driver.core.sessions
        self._carry_out = driver.carry_out
        self.clock = clock
        self.max_frame_bytes = max_frame_bytes
        self.serve_batch_bytes = serve_batch_bytes
        # Fetched events are checked under their channel's SDS profile (sync.sds.profile).
        self.spec = IngestSpec(network_id, event_id_layout, dict(profiles or {}), MAX_EVENT_BYTES)

    # -- fetching ------------------------------------------------------------------------------

    async def fetch(self, stream: FramedStream, plan: SessionPlan, stats: SessionStats) -> None:
        """Ask for the events of our missing keys, validate and ingest what arrives."""
        try:
            ticket, keys = await self.driver.claim(plan)
            await self._fetch_claimed(stream, ticket, keys, stats)
        finally:
            self._carry_out(self.core.close(plan))

    async def _fetch_claimed(self, stream: FramedStream, sid: int, keys: list[bytes],
                             stats: SessionStats) -> None:
        """Three stages overlap: the peer reads and sends the next want list while worker
        threads verify the batch before it and this task ingests the one before that."""
        core = WantFetcher(keys, batch=self.fetch_batch, ahead=FETCH_AHEAD,
                           max_event_bytes=MAX_EVENT_BYTES, peer=stream.peer_id,
                           first=FIRST_WANT)
        send, recv = trio.open_memory_channel[_Batch](FETCH_AHEAD)
        failure: list[BaseException] = []

        async def download() -> None:
            try:
                async with send:
                    for frame in core.next_frames():
                        await stream.send(frame)
                    while core.answers_pending:
                        got = core.receive(await stream.receive())
                        if got.final:
                            await self.store.wait_room(STORE_BACKLOG_EVENTS)
                            # Time spent waiting for our store is not the peer withholding.
                            self.core.progress(sid, self.clock.now())
                            for frame in core.next_frames():
                                await stream.send(frame)
                        # Verification runs while the next answer is read: the channel's
                        # size bounds the batches in flight.
                        pending = PendingBatch()
                        nursery.start_soon(verify_batch, got.wires, pending, self.ingest,
                                           self.spec)
                        await send.send((got.wires, pending, got.final))
            except (P2PError, trio.TooSlowError, RemoteProtocolError) as exc:
                failure.append(exc)
                nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(download)
            async with recv:
                async for wires, pending, final in recv:
                    try:
                        await pending.done.wait()
                        if pending.error is not None:
                            raise pending.error
                        await self._ingest_verified(core, sid, wires, pending.result,
                                              stream.peer_id, stats)
                    except (RemoteProtocolError, IngestUnavailable) as exc:
                        failure.append(exc)
                        nursery.cancel_scope.cancel()
                        break
                    if final:
                        self._answer_done(core, sid, stream.peer_id, stats)
                    await trio.lowlevel.checkpoint()
        if failure:
            raise failure[0]

    def _answer_done(self, core: WantFetcher, sid: int, peer: str, stats: SessionStats) -> None:
        withheld = core.answer_done()
        stats.withheld += len(withheld)
        # The peer advertised these keys and did not deliver them: someone else will.
        self._carry_out(self.core.answer_done(sid, withheld))

    async def _ingest_verified(self, core: WantFetcher, sid: int, wires: list[bytes],
                               batch: VerifiedBatch, peer: str, stats: SessionStats) -> None:
        """One verified batch: invalid events end the session (``screen``), unrequested ones
        too (``WantFetcher.accept``); the claims learn what was delivered; the events go to
        SDS in causal order (``FetchedIngest.ingest_verified``)."""
        rejected, error = screen(batch, peer)
        if error is not None:
            stats.rejected += error.count
            self._carry_out(rejected)
            raise error  # its kind costs the peer invalid_event per event (ReconLifecycle)
        keys = batch.keys
        for key in keys:
            self._accept(core, key, stats)
        if not keys:
            return
        self.core.delivered(sid, keys, self.clock.now())
        refused = await self.channels.fetched.ingest_verified(batch, wires, None, peer)
        stats.rejected += refused
        stats.fetched += len(keys) - refused
        self.metrics.inc("recon_events_fetched_total", len(keys))

    def _accept(self, core: WantFetcher, key: bytes, stats: SessionStats) -> None:
        """Was ``key`` asked for? An unrequested event ends the session."""
        try:
            core.accept(key)
        except RemoteProtocolError as exc:
            stats.rejected += 1
            self.metrics.inc("events_rejected_total", reason=exc.kind.value)
            raise

    # -- serving -------------------------------------------------------------------------------

    async def serve(self, stream: FramedStream, budget: int, stats: SessionStats) -> None:
        """Answer the peer's want lists with the events we hold, within a byte budget."""
        charge = self.work.charger(stream.peer_id, "want") if self.work else None
        sent = await serve_wants(stream, self.store, budget, self.fetch_batch,
                                 self.max_frame_bytes, self.serve_batch_bytes,
                                 on_sent=lambda n: self.metrics.inc("recon_events_served_total", n),
                                 charge=charge)
        stats.served += sent
