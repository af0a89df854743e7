"""Recon over libp2p streams: reconcile event logs with peers, fetch what is missing.

The key store is a ``MemoryKeyStore`` loaded from the database at start-up and updated after
every commit, so it only ever holds keys of events that are durably stored. Events fetched from
a peer are validated (id, signature, size, and that we asked for them) by the SDS channel before
anything is stored.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import trio

from node.channels import ChannelService
from node.events import record_of_event
from node.logs import kv
from node.metrics import Metrics
from node.p2p import FramedStream, P2PError, P2PHost
from node.recon_wire import (
    BUSY,
    EVENTS,
    EVENTS_LAST,
    RECON,
    WANT,
    WANT_LAST,
    FrameDecodeError,
    pack_items,
    unpack_items,
)
from node.store import EventStore
from storage import AppendResult, EventRecord, events_by_keys, keys_in_range
from sync.errors import RemoteProtocolError
from sync.recon import MemoryKeyStore
from sync.recon.eventid import CIP124_DRAFT, channel_bounds, key_height, sender_bounds
from sync.recon.session import MissingKeys, ReconConfig, ReconSession
from sync.sds import SignedEvent, decode_event
from sync.sds.profile import decode_event_by_channel

__all__ = ["RECON_PROTOCOL", "ReconService"]

log = logging.getLogger("syncnode.recon")
RECON_PROTOCOL = "/syncnode/recon/1.0.0"
MAX_KEY_BYTES = 256
MAX_EVENT_BYTES = 1 << 20
PENDING_GRACE_S = 30.0
MIN_ROUND_S = 1.0
VERIFY_THREADS = 2
# Want lists in flight during a fetch: the peer prepares the next while we ingest one.
FETCH_AHEAD = 2
Decoder = Callable[[bytes], SignedEvent]


def _default_decode(wire: bytes) -> SignedEvent:
    return decode_event(wire, max_size=MAX_EVENT_BYTES)


def _decode_all(wires: list[bytes], decode: Decoder = _default_decode
                ) -> list[SignedEvent | None]:
    out: list[SignedEvent | None] = []
    for wire in wires:
        try:
            out.append(decode(wire))
        except RemoteProtocolError:
            out.append(None)
    return out


async def verify_in_threads(wires: list[bytes], threads: int = VERIFY_THREADS,
                            decode: Decoder = _default_decode) -> list[SignedEvent | None]:
    """Decode and verify events (id and signature, or what the channel's SDS profile asks
    for) in worker threads: libsodium releases the GIL, so a batch is verified on every core
    while the event loop keeps serving."""
    if len(wires) < 64:
        return _decode_all(wires, decode)
    step = -(-len(wires) // threads)
    parts: list[list[SignedEvent | None]] = [[] for _ in range(threads)]

    async def run(i: int) -> None:
        parts[i] = await trio.to_thread.run_sync(_decode_all, wires[i * step : (i + 1) * step],
                                                 decode)

    async with trio.open_nursery() as nursery:
        for i in range(threads):
            nursery.start_soon(run, i)
    return [event for part in parts for event in part]


class ReconAbort(Exception):
    """The peer broke the protocol; the session ends and the peer is backed off."""


class PeerBusy(Exception):
    """The peer declined the session: it is already syncing with us (not a failure)."""


@dataclass
class PeerSyncState:
    interests: tuple[tuple[bytes, bytes], ...] | None = None
    failures: int = 0
    backoff_until: float = 0.0
    sessions: int = 0


@dataclass
class SessionStats:
    fetched: int = 0
    served: int = 0
    rejected: int = 0
    missing: list[bytes] = field(default_factory=list)


class ReconService:
    def __init__(
        self,
        *,
        host: P2PHost,
        store: EventStore,
        channels: ChannelService,
        metrics: Metrics,
        network_id: int,
        interval_s: float,
        session_timeout_s: float,
        fetch_batch: int,
        config: ReconConfig,
        allowed_senders: frozenset[str] | None = None,
        gossip_grace_s: float = 0.0,
        event_id_layout: str = CIP124_DRAFT,
    ) -> None:
        self.host = host
        self.store = store
        self.channels = channels
        self.metrics = metrics
        self.network_id = network_id
        self.event_id_layout = event_id_layout
        profiles = channels.profiles
        # Fetched events are checked under their channel's SDS profile (sync.sds.profile).
        self._decode: Decoder = functools.partial(
            decode_event_by_channel, profiles=profiles, max_size=MAX_EVENT_BYTES)
        self.interval_s = interval_s
        self.session_timeout_s = session_timeout_s
        self.fetch_batch = fetch_batch
        self.gossip_grace_ms = int(gossip_grace_s * 1000)
        # Sessions started by new events come at most this often: one sooner could not fetch
        # anything gossip is still delivering, and each session costs both sides a stream and
        # several round trips (at a few per second they were a fifth of an idle cluster's CPU).
        self.min_round_s = max(MIN_ROUND_S, gossip_grace_s)
        self.config = config
        self.keys = MemoryKeyStore()
        if allowed_senders:
            # A closed group is only interested in its members' streams, so Recon never even
            # offers anything else.
            members = allowed_senders | {channels.peer_id}
            self.interests = sorted(
                sender_bounds(network_id, c, m) for c in channels.names for m in members
            )
        else:
            self.interests = sorted(channel_bounds(network_id, c) for c in channels.names)
        self.peers: dict[str, PeerSyncState] = {}
        self._wake = trio.Event()
        # Peers we have a session with, as initiator and as responder: one session per pair
        # at a time, since two would reconcile and fetch the same difference twice.
        self._busy: set[str] = set()
        self._serving: set[str] = set()
        # Keys fetched and handed to SDS but not committed yet: not fetched again meanwhile.
        self._pending: dict[bytes, float] = {}
        host.set_stream_handler(RECON_PROTOCOL, self._respond)
        store.on_commit(self._on_commit)
        for name in ("recon_sessions_total", "recon_sessions_declined_total",
                     "recon_events_fetched_total",
                     "recon_events_served_total", "recon_errors_total"):
            metrics.describe(name, "counter", name.replace("_", " "))

    async def load(self) -> None:
        """Load every stored key (ascending) into the in-memory key store."""
        keys: list[bytes] = []
        cursor = b""
        while True:
            page = await self.store.read(keys_in_range, cursor, None, 100_000)
            keys.extend(page)
            if len(page) < 100_000:
                break
            cursor = page[-1] + b"\0"
        self.keys = MemoryKeyStore.from_sorted(keys)
        log.info("recon key store loaded", extra=kv(keys=len(keys)))

    def _on_commit(self, result: AppendResult, records: Sequence[EventRecord]) -> None:
        if not result.inserted:
            return
        new = {m for _, m in result.inserted}
        for record in records:
            self._pending.pop(record.recon_key, None)
            if record.message_id in new:
                self.keys.insert(record.recon_key)
        # CIP-124: a new event is announced by reconciling with a random peer soon.
        self.poke()

    def poke(self) -> None:
        """Reconcile soon (e.g. after a new peer connected or a gap was seen)."""
        self._wake.set()

    # -- initiating ----------------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_peers)
            while True:
                peer = self._choose_peer()
                if peer is not None:
                    nursery.start_soon(self.sync_with, peer)
                self._wake = trio.Event()
                # Pokes come with every commit: at most one new session per min_round_s.
                await trio.sleep(self.min_round_s)
                with trio.move_on_after(self.interval_s * random.uniform(0.5, 1.0)):
                    await self._wake.wait()

    async def _watch_peers(self) -> None:
        async for event in self.host.peer_events():
            if event.kind == "connected":
                self.peers.setdefault(event.peer_id, PeerSyncState())
                # A fresh connection is the moment a late joiner needs to catch up.
                self.poke()

    def _choose_peer(self) -> str | None:
        """CIP-124 random peer sync order: weighted by interest overlap, inversely by latency."""
        now = time.monotonic()
        candidates: list[tuple[str, float]] = []
        for peer in self.host.connected_peers():
            state = self.peers.setdefault(peer, PeerSyncState())
            if peer in self._busy or peer in self._serving or state.backoff_until > now:
                continue
            overlap = 1.0
            if state.interests is not None:
                shared = sum(
                    1 for lo, hi in self.interests
                    if any(lo < theirs_hi and theirs_lo < hi
                           for theirs_lo, theirs_hi in state.interests)
                )
                overlap = shared / max(len(self.interests), 1)
                if overlap == 0:
                    continue
            info = self.host.peer_info(peer)
            latency = info.latency_s if info is not None and info.latency_s else 0.05
            candidates.append((peer, overlap / (latency + 0.01)))
        if not candidates:
            return None
        chosen: str = random.choices([p for p, _ in candidates],
                                     weights=[w for _, w in candidates])[0]
        return chosen

    async def sync_with(self, peer: str) -> SessionStats | None:
        if peer in self._busy or peer in self._serving:
            return None
        self._busy.add(peer)
        state = self.peers.setdefault(peer, PeerSyncState())
        stats = SessionStats()
        started = time.monotonic()
        try:
            async with await self.host.open_stream(peer, RECON_PROTOCOL) as stream:
                session = ReconSession.initiator(self.keys, self.interests, self.config,
                                                 peer=peer)
                with trio.fail_after(self.session_timeout_s):
                    await stream.send(bytes([RECON]) + session.start())
                    await self._reconcile(stream, session, stats)
                state.interests = tuple(session.peer_interests or ())
                # The transfer phases have no overall deadline (a large catch-up takes as long
                # as it takes): their work is bounded by what was reconciled, every read has a
                # timeout, and a stalled batch ends the session.
                await self._fetch(stream, stats)
                await self._serve(stream, stats)
        except PeerBusy:
            self.metrics.inc("recon_sessions_declined_total", role="initiator")
            return None
        except (P2PError, trio.TooSlowError, RemoteProtocolError, ReconAbort) as exc:
            self._failed(peer, state, exc)
            return None
        finally:
            self._busy.discard(peer)
        state.failures = 0
        state.sessions += 1
        self.metrics.inc("recon_sessions_total", role="initiator")
        if stats.fetched:
            log.info("recon fetched events", extra=kv(
                peer=peer, events=stats.fetched, seconds=round(time.monotonic() - started, 3)))
        return stats

    def _failed(self, peer: str, state: PeerSyncState, exc: Exception) -> None:
        state.failures += 1
        state.backoff_until = time.monotonic() + min(300.0, 2.0 ** state.failures)
        self.metrics.inc("recon_errors_total", kind=type(exc).__name__)
        log.info("recon session failed", extra=kv(peer=peer, error=str(exc) or type(exc).__name__))

    # -- responding ----------------------------------------------------------------------------

    async def _respond(self, stream: FramedStream) -> None:
        peer = stream.peer_id
        state = self.peers.setdefault(peer, PeerSyncState())
        stats = SessionStats()
        if self._declines(peer):
            async with stream:
                with trio.move_on_after(self.session_timeout_s):
                    await stream.send(bytes([BUSY]))
            self.metrics.inc("recon_sessions_declined_total", role="responder")
            return
        self._serving.add(peer)
        try:
            async with stream:
                session = ReconSession.responder(self.keys, self.interests, self.config,
                                                 peer=peer)
                with trio.fail_after(self.session_timeout_s):
                    await self._reconcile(stream, session, stats)
                state.interests = tuple(session.peer_interests or ())
                await self._serve(stream, stats)
                await self._fetch(stream, stats)
        except (P2PError, trio.TooSlowError, RemoteProtocolError, ReconAbort) as exc:
            self._failed(peer, state, exc)
            return
        finally:
            self._serving.discard(peer)
        self.metrics.inc("recon_sessions_total", role="responder")

    def _declines(self, peer: str) -> bool:
        """One session per pair: a second one from the same peer is declined, and when both
        sides started one at the same moment the session of the smaller peer id goes on."""
        if peer in self._serving:
            return True
        return peer in self._busy and self.channels.peer_id < peer

    # -- shared phases ---------------------------------------------------------------------------

    async def _reconcile(
        self, stream: FramedStream, session: ReconSession, stats: SessionStats
    ) -> None:
        while not session.done:
            frame = await stream.receive()
            if frame == bytes([BUSY]) and session.is_initiator and session.messages_received == 0:
                raise PeerBusy()
            if not frame or frame[0] != RECON:
                raise ReconAbort("expected a Recon message")
            reply = session.receive(frame[1:])
            for event in session.events():
                if isinstance(event, MissingKeys):
                    stats.missing.extend(event.keys)
            if reply is not None:
                await stream.send(bytes([RECON]) + reply)

    async def _fetch(self, stream: FramedStream, stats: SessionStats) -> None:
        """Ask for the events of our missing keys, validate and ingest what arrives."""
        now = time.monotonic()
        self._pending = {k: t for k, t in self._pending.items() if t > now}
        missing = [
            k for k in stats.missing if k not in self._pending and not self.keys.contains(k)
        ]
        if self.gossip_grace_ms:
            missing = self._not_recent(missing)
        wanted = set(missing)
        # Claimed until this session has ingested them (a catch-up can outlast any fixed grace),
        # so that a concurrent session (the peer may be reconciling with us at the same time)
        # does not fetch the same events; released if this session fails.
        for key in missing:
            self._pending[key] = math.inf
        try:
            await self._fetch_chunks(stream, missing, wanted, stats)
        except BaseException:
            for key in wanted:
                self._pending.pop(key, None)
            raise

    def _not_recent(self, keys: list[bytes]) -> list[bytes]:
        """Drop keys of events gossip is probably still delivering: under load, fetching them
        as well would move and verify them twice just when the node has least time to spare.
        A timestamp far ahead of our clock (a sender's fast clock) is not held back, and neither
        is a key without one (the ceramic-one layout has no event height): fetched at once."""
        now_ms = int(time.time() * 1000)
        lo, hi = now_ms - self.gossip_grace_ms, now_ms + self.gossip_grace_ms
        kept = []
        for key in keys:
            try:
                height = key_height(key)
            except RemoteProtocolError:  # malformed: fetched, and rejected on validation
                height = None
            if height is None or not lo <= height <= hi:
                kept.append(key)
        return kept

    async def _fetch_chunks(
        self, stream: FramedStream, missing: list[bytes], wanted: set[bytes], stats: SessionStats
    ) -> None:
        """Three stages overlap: the peer reads and sends the next want list while worker
        threads verify the batch before it and this task ingests the one before that."""
        step = self.fetch_batch
        chunks = [missing[i : i + step] for i in range(0, len(missing), step)] or [[]]
        verified_send, verified_recv = trio.open_memory_channel[
            tuple[list[bytes], list[SignedEvent | None]]](FETCH_AHEAD)
        failure: list[BaseException] = []

        async def download() -> None:
            try:
                async with verified_send:
                    await self._download(stream, chunks, verified_send)
            except (P2PError, trio.TooSlowError, RemoteProtocolError, ReconAbort) as exc:
                failure.append(exc)
                nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(download)
            async with verified_recv:
                async for wires, events in verified_recv:
                    try:
                        self._ingest_batch(wires, events, stream.peer_id, wanted, stats)
                    except ReconAbort as exc:
                        failure.append(exc)
                        nursery.cancel_scope.cancel()
                        break
                    await trio.lowlevel.checkpoint()
        if failure:
            raise failure[0]

    async def _download(
        self, stream: FramedStream, chunks: list[list[bytes]],
        out: trio.MemorySendChannel[tuple[list[bytes], list[SignedEvent | None]]],
    ) -> None:
        sent = 0

        async def ask_next() -> None:
            nonlocal sent
            last = sent == len(chunks) - 1
            await stream.send(pack_items(WANT_LAST if last else WANT, chunks[sent]))
            sent += 1

        for _ in range(min(FETCH_AHEAD, len(chunks))):
            await ask_next()
        for _ in range(len(chunks)):
            final = False
            frames = 0
            while not final:
                wires, final = await self._receive_events(stream)
                frames += 1
                if frames > self.fetch_batch:  # one answer cannot hold more frames than keys
                    raise ReconAbort("too many events frames")
                if final and sent < len(chunks):
                    await ask_next()
                await out.send((wires, await verify_in_threads(wires, decode=self._decode)))

    async def _receive_events(self, stream: FramedStream) -> tuple[list[bytes], bool]:
        """One frame of events and whether it ends the answer to a want list."""
        frame = await stream.receive()
        if not frame or frame[0] not in (EVENTS, EVENTS_LAST):
            raise ReconAbort("expected events")
        try:
            wires = unpack_items(frame[1:], max_items=self.fetch_batch,
                                 max_item_bytes=MAX_EVENT_BYTES)
        except FrameDecodeError as exc:
            raise ReconAbort(str(exc)) from None
        final = frame[0] == EVENTS_LAST
        if not final and not wires:  # an empty non-final frame could be repeated forever
            raise ReconAbort("empty events frame")
        return wires, final

    def _ingest_batch(
        self, wires: list[bytes], events: list[SignedEvent | None], peer: str,
        wanted: set[bytes], stats: SessionStats,
    ) -> None:
        parsed = []
        for wire, event in zip(wires, events, strict=True):
            if event is None or event.lamport is None:
                stats.rejected += 1
                raise ReconAbort("peer sent an invalid event")
            key = record_of_event(self.network_id, event, self.event_id_layout).recon_key
            if key not in wanted:
                stats.rejected += 1
                self.metrics.inc("events_rejected_total", reason="recon unrequested event")
                raise ReconAbort("peer sent an event we did not ask for")
            wanted.discard(key)
            parsed.append((event.lamport, key, wire, event))
        # Causal dependencies have lower Lamport timestamps: feeding in that order lets SDS
        # deliver at once instead of buffering and reporting gaps.
        parsed.sort(key=lambda item: (item[0], item[1]))
        expiry = time.monotonic() + PENDING_GRACE_S
        for _, key, wire, event in parsed:
            if self.channels.ingest(wire, peer, verified=event) is None:
                stats.rejected += 1
                raise ReconAbort("peer sent an invalid event")
            # Still waiting for its dependencies: not fetched again before the grace ends.
            self._pending[key] = expiry
            stats.fetched += 1
        self.metrics.inc("recon_events_fetched_total", len(parsed))

    async def _serve(self, stream: FramedStream, stats: SessionStats) -> None:
        """Answer the peer's WANT frames with the events we hold."""
        budget = len(self.keys) + self.fetch_batch
        while True:
            frame = await stream.receive()
            if not frame or frame[0] not in (WANT, WANT_LAST):
                raise ReconAbort("expected a want list")
            try:
                keys = unpack_items(frame[1:], max_items=max(self.fetch_batch, 1024),
                                    max_item_bytes=MAX_KEY_BYTES)
            except FrameDecodeError as exc:
                raise ReconAbort(str(exc)) from None
            if frame[0] == WANT and not keys:  # an empty non-final frame could repeat forever
                raise ReconAbort("empty want frame")
            budget -= len(keys)
            if budget < 0:
                raise ReconAbort("peer wants more events than we hold")
            found = await self.store.read(events_by_keys, keys) if keys else []
            await self._send_events([e.wire for e in found], stream)
            stats.served += len(found)
            self.metrics.inc("recon_events_served_total", len(found))
            if frame[0] == WANT_LAST:
                return

    async def _send_events(self, wires: list[bytes], stream: FramedStream) -> None:
        limit = self.host.config.max_frame_bytes - 16
        batch: list[bytes] = []
        size = 0
        for wire in wires:
            if batch and (size + len(wire) + 8 > limit or len(batch) >= self.fetch_batch):
                await stream.send(pack_items(EVENTS, batch))
                batch, size = [], 0
            batch.append(wire)
            size += len(wire) + 8
        await stream.send(pack_items(EVENTS_LAST, batch))
