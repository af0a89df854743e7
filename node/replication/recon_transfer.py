"""The WANT/EVENTS phase of a Recon session over a libp2p stream: glue around
:mod:`sync.transfer` (read a frame, call the core, write what it says).

Fetching: missing keys are claimed in a :class:`ClaimTable` (so no concurrent session fetches
them too), asked for in want lists, verified in worker threads and ingested through SDS. Keys
the peer leaves out of its answer return to the pool at once and cost it standing; so do claims
that lapse because the peer stopped delivering.

Serving: ``recon_serve.py``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import trio

from node.logs import kv
from node.metrics import Metrics
from node.p2p import FramedStream, P2PError
from node.p2p.standing import PeerStanding
from node.replication.channels import ChannelService
from node.replication.ingest import IngestPool, IngestUnavailable
from node.replication.recon_serve import serve_wants
from node.replication.verify import MAX_EVENT_BYTES, Decoder, PendingBatch, verify_batch
from node.replication.work import WorkGate
from node.store import EventStore
from storage import existing_keys
from sync.errors import ErrorKind, RemoteProtocolError
from sync.ingest import VerifiedBatch
from sync.recon.eventid import CIP124_DRAFT
from sync.sds import SignedEvent
from sync.sds.profile import decode_event_by_channel
from sync.stored_event import record_of_event
from sync.transfer import (
    ClaimTable,
    WantFetcher,
    not_recent,
)

__all__ = ["SessionStats", "Transfer"]

log = logging.getLogger("syncnode.recon")
# Want lists in flight during a fetch: the peer prepares the next while we ingest one.
FETCH_AHEAD = 4
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
    missing: list[bytes] = field(default_factory=list)
    #: Missing keys beyond ``recon.max_missing_keys`` were left for the next session.
    truncated: bool = False
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
        claims: ClaimTable,
        standing: PeerStanding | None,
        max_frame_bytes: int,
        serve_batch_bytes: int,
        gossip_grace_ms: int = 0,
        on_released: Callable[[], None] = lambda: None,
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
        self.network_id = network_id
        self.fetch_batch = fetch_batch
        self.claims = claims
        self.standing = standing
        self.max_frame_bytes = max_frame_bytes
        self.serve_batch_bytes = serve_batch_bytes
        self.gossip_grace_ms = gossip_grace_ms
        self.on_released = on_released
        self.event_id_layout = event_id_layout
        # Fetched events are checked under their channel's SDS profile (sync.sds.profile).
        self._decode: Decoder = functools.partial(
            decode_event_by_channel, profiles=dict(profiles or {}), max_size=MAX_EVENT_BYTES)
        for name, text in (
            ("recon_keys_withheld_total", "Keys a peer advertised and left out of its answer"),
            ("recon_claims_lapsed_total", "Claimed keys released because the peer stalled"),
        ):
            metrics.describe(name, "counter", text)
            metrics.inc(name, 0)

    def penalise(self, peer: str, reason: str, count: float = 1.0) -> None:
        if self.standing is not None:
            self.standing.penalise(peer, reason, count)

    def handle_claims_timer(self, now: float) -> None:
        """Claims of sessions that stopped delivering go back to the pool; their peers pay."""
        lapsed = self.claims.handle_timer(now)
        for each in lapsed:
            self.metrics.inc("recon_claims_lapsed_total", each.count)
            self.penalise(each.peer, "withheld")
        if lapsed:
            self.on_released()

    # -- fetching ------------------------------------------------------------------------------

    async def fetch(self, stream: FramedStream, stats: SessionStats) -> None:
        """Ask for the events of our missing keys, validate and ingest what arrives."""
        peer = stream.peer_id
        now = time.monotonic()
        self.handle_claims_timer(now)
        missing = stats.missing
        if self.gossip_grace_ms:
            missing = not_recent(missing, int(time.time() * 1000), self.gossip_grace_ms)
        sid = self.claims.open(peer, now)
        try:
            keys = self.claims.claim(sid, missing, now)
            if keys:
                # Read after claiming: a key whose commit lands during the read was still
                # held when claimed (so not claimed), or is committed before the read and seen
                # by it. Read first, a slow store's commits in between were fetched twice.
                stored = await self.store.read(existing_keys, keys)
                if stored:
                    self.claims.release(sid, [k for k in keys if k in stored])
                    keys = [k for k in keys if k not in stored]
            await self._fetch_claimed(stream, sid, keys, stats)
        finally:
            if self.claims.close(sid):
                self.on_released()

    async def _fetch_claimed(self, stream: FramedStream, sid: int, keys: list[bytes],
                             stats: SessionStats) -> None:
        """Three stages overlap: the peer reads and sends the next want list while worker
        threads verify the batch before it and this task ingests the one before that."""
        core = WantFetcher(keys, batch=self.fetch_batch, ahead=FETCH_AHEAD,
                           max_event_bytes=MAX_EVENT_BYTES, peer=stream.peer_id)
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
                            self.claims.progress(sid, time.monotonic())
                            for frame in core.next_frames():
                                await stream.send(frame)
                        # Verification runs while the next answer is read: the channel's
                        # size bounds the batches in flight.
                        pending = PendingBatch()
                        nursery.start_soon(verify_batch, got.wires, pending, self.ingest,
                                           self._decode)
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
                        if isinstance(pending.result, VerifiedBatch):
                            self._ingest_verified(core, sid, wires, pending.result,
                                                  stream.peer_id, stats)
                        else:
                            self._ingest(core, sid, wires, pending.result, stream.peer_id,
                                         stats)
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
        if not withheld:
            return
        # The peer advertised these keys and did not deliver them: someone else will.
        stats.withheld += len(withheld)
        self.claims.release(sid, withheld)
        self.metrics.inc("recon_keys_withheld_total", len(withheld))
        self.penalise(peer, "short_answer")
        log.info("peer withheld advertised events", extra=kv(peer=peer, keys=len(withheld)))
        self.on_released()

    def _ingest_verified(self, core: WantFetcher, sid: int, wires: list[bytes],
                         batch: VerifiedBatch, peer: str, stats: SessionStats) -> None:
        """``_ingest`` for a batch the ingest workers checked: per event only the claim
        bookkeeping here, the rest in bulk (``ChannelService.ingest_verified``)."""
        if batch.rejected:
            reasons = list(batch.rejected.values())
            stats.rejected += len(reasons)
            for kind in batch.rejected_kinds.values():
                self.metrics.inc("events_rejected_total", reason=kind.value)
            # Ends the session; the peer pays ``invalid_event`` per event (ReconService._failed).
            raise RemoteProtocolError(f"peer sent {len(reasons)} invalid events "
                                      f"({reasons[0]})", peer, ErrorKind.INVALID_EVENTS,
                                      len(reasons))
        keys = batch.keys
        for key in keys:
            self._accept(core, key, stats)
        if not keys:
            return
        now = time.monotonic()
        self.claims.progress(sid, now)
        for key in keys:
            self.claims.delivered(sid, key, now)
        # Causal dependencies have lower Lamport timestamps (see _ingest).
        lamports = batch.lamports
        order = sorted(range(len(keys)), key=lambda i: (lamports[i], keys[i]))
        refused = self.channels.ingest_verified(batch, wires, order, peer)
        stats.rejected += refused
        stats.fetched += len(keys) - refused
        self.metrics.inc("recon_events_fetched_total", len(keys))

    def _accept(self, core: WantFetcher, key: bytes, stats: SessionStats) -> None:
        """Was ``key`` asked for? An unrequested event ends the session."""
        try:
            core.accept(key)
        except RemoteProtocolError:
            stats.rejected += 1
            self.metrics.inc("events_rejected_total", reason=ErrorKind.UNREQUESTED.value)
            raise

    def _ingest(self, core: WantFetcher, sid: int, wires: list[bytes],
                events: list[SignedEvent | None], peer: str, stats: SessionStats) -> None:
        parsed = []
        for wire, event in zip(wires, events, strict=True):
            if event is None or event.lamport is None:
                stats.rejected += 1
                raise RemoteProtocolError("peer sent an invalid event", peer,
                                          ErrorKind.INVALID_EVENTS)
            key = record_of_event(self.network_id, event, self.event_id_layout).recon_key
            self._accept(core, key, stats)
            parsed.append((event.lamport, key, wire, event))
        # Causal dependencies have lower Lamport timestamps: feeding in that order lets SDS
        # deliver at once instead of buffering and reporting gaps.
        parsed.sort(key=lambda item: (item[0], item[1]))
        now = time.monotonic()
        if parsed:
            self.claims.progress(sid, now)
        for _, key, wire, event in parsed:
            self.claims.delivered(sid, key, now)
            if self.channels.ingest(wire, peer, verified=event) is None:
                # Valid, but refused by policy (clock bound, roles, closed group): counted and
                # charged by the channel service; an honest peer may hold such an event, so
                # the session goes on.
                stats.rejected += 1
                continue
            stats.fetched += 1
        self.metrics.inc("recon_events_fetched_total", len(parsed))

    # -- serving -------------------------------------------------------------------------------

    async def serve(self, stream: FramedStream, budget: int, stats: SessionStats) -> None:
        """Answer the peer's want lists with the events we hold, within a byte budget."""
        charge = self.work.charger(stream.peer_id, "want") if self.work else None
        sent = await serve_wants(stream, self.store, budget, self.fetch_batch,
                                 self.max_frame_bytes, self.serve_batch_bytes,
                                 on_sent=lambda n: self.metrics.inc("recon_events_served_total", n),
                                 charge=charge)
        stats.served += sent
