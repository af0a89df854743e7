"""Recon over libp2p streams: reconcile event logs with peers, fetch what is missing.

The key store is a ``SummaryKeyStore`` over the events table: in memory only a bounded bucket
summary, rebuilt by one index scan at start-up and updated after every commit, so it only ever
counts keys of events that are durably stored (docs/architecture.md "Recon key store").
Events fetched from a peer are validated (id, signature, size, and that we asked for them) by
the SDS channel before anything is stored.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from node.logs import kv
from node.metrics import Metrics
from node.p2p.host import FramedStream, P2PError, P2PHost
from node.p2p.standing import PeerStanding
from node.replication.channels import ChannelService
from node.replication.recon_transfer import SessionStats, Transfer
from node.store import EventStore
from storage import AppendResult, EventRecord, SqlKeySource, existing_keys, open_summary_store
from sync.errors import RemoteProtocolError
from sync.recon import SummaryKeyStore
from sync.recon.eventid import CIP124_DRAFT, channel_bounds, sender_bounds
from sync.recon.session import PROTOCOL_ID, MissingKeys, ReconConfig, ReconSession
from sync.transfer import BUSY, RECON, ClaimTable

__all__ = ["RECON_PROTOCOL", "ReconService"]

log = logging.getLogger("syncnode.recon")
RECON_PROTOCOL = PROTOCOL_ID  # the stream protocol id is the sans-IO session's
PENDING_GRACE_S = 30.0
MIN_ROUND_S = 1.0
# Peers whose sync state (interests, back-off) is remembered while they are not connected.
MAX_PEER_STATES = 1024


RECON_METRICS = {
    "recon_sessions_total": "Recon sessions completed, by role (initiator or responder)",
    "recon_sessions_declined_total": "Recon sessions declined because one with the same peer "
                                     "was already running, by role",
    "recon_events_fetched_total": "Events received from peers through Recon",
    "recon_events_stored_total": "Events fetched through Recon that were new to the database "
                                 "(fetched / stored is 1 when each event is fetched once)",
    "recon_events_served_total": "Events sent to peers through Recon",
    "recon_errors_total": "Recon sessions that failed (the peer is backed off), by error kind",
    "recon_missing_dropped_total": "Missing keys a session could not track (bounded list full)",
    "recon_protocol_errors_total": "Recon sessions a peer broke the protocol in, by reason",
}


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
        standing: PeerStanding | None = None,
        claim_timeout_s: float = 15.0,
        max_missing_keys: int = 100_000,
        serve_batch_bytes: int = 1 << 20,
        max_sessions: int = 16,
        keystore_limits: tuple[int, int, int] = (256, 32768, 131_072),
    ) -> None:
        self.host = host
        self.store = store
        self.channels = channels
        self.metrics = metrics
        self.network_id = network_id
        self.event_id_layout = event_id_layout
        self.interval_s = interval_s
        self.session_timeout_s = session_timeout_s
        self.fetch_batch = fetch_batch
        self.gossip_grace_ms = int(gossip_grace_s * 1000)
        # Sessions started by new events come at most this often: one sooner could not fetch
        # anything gossip is still delivering, and each session costs both sides a stream and
        # several round trips (at a few per second they were a fifth of an idle cluster's CPU).
        self.min_round_s = max(MIN_ROUND_S, gossip_grace_s)
        self.config = config
        # (keys per bucket, most buckets, cached keys): what bounds the key store's memory.
        self.keystore_limits = keystore_limits
        load, max_buckets, cache_keys = keystore_limits
        self.keys = SummaryKeyStore(SqlKeySource(store.engine), load=load,
                                    max_buckets=max_buckets, cache_keys=cache_keys)
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
        self.standing = standing
        self.max_missing_keys = max_missing_keys
        self.max_sessions = max_sessions
        # Keys being fetched, and fetched keys handed to SDS but not committed yet: not
        # fetched again meanwhile, unless the claim lapses (the peer withholds them).
        self.claims = ClaimTable(claim_timeout_s, max_keys=4 * max_missing_keys,
                                 hold_s=PENDING_GRACE_S)
        self.transfer = Transfer(
            store=store, channels=channels, metrics=metrics, network_id=network_id,
            fetch_batch=fetch_batch, claims=self.claims, standing=standing,
            max_frame_bytes=host.config.max_frame_bytes, serve_batch_bytes=serve_batch_bytes,
            gossip_grace_ms=self.gossip_grace_ms, on_released=self.poke,
            event_id_layout=event_id_layout, profiles=channels.profiles,
        )
        host.set_stream_handler(RECON_PROTOCOL, self._respond)
        store.on_commit(self._on_commit)
        for name, help_text in RECON_METRICS.items():
            metrics.describe(name, "counter", help_text)
        metrics.describe_histogram(
            "recon_session_seconds",
            "Duration of completed Recon sessions (reconcile, fetch and serve), by role")
        metrics.gauge_fn("recon_claims", lambda: float(len(self.claims)),
                         "Missing keys claimed by a session fetching them")
        metrics.gauge_fn("recon_claims_held", lambda: float(self.claims.held),
                         "Fetched keys waiting for their dependencies or the commit")
        metrics.gauge_fn("recon_keystore_buckets", lambda: float(len(self.keys.summary)),
                         "Buckets of the Recon key store's in-memory summary")
        metrics.counter_fn("recon_keystore_reads_total", lambda: float(self.keys.reads),
                           "Buckets of keys the Recon key store read from the database")

    async def load(self) -> None:
        """Rebuild the key store's summary: one scan of the key index, memory bounded."""
        load, max_buckets, cache_keys = self.keystore_limits
        self.keys = await trio.to_thread.run_sync(
            lambda: open_summary_store(self.store.engine, load=load, max_buckets=max_buckets,
                                       cache_keys=cache_keys))
        log.info("recon key store loaded", extra=kv(keys=len(self.keys),
                                                    buckets=len(self.keys.summary)))

    def _on_commit(self, result: AppendResult, records: Sequence[EventRecord]) -> None:
        if not result.inserted:
            return
        new = {m for _, m in result.inserted}
        fetched = 0
        stored: list[bytes] = []
        for record in records:
            held = self.claims.committed(record.recon_key)
            if record.message_id in new:
                stored.append(record.recon_key)
                fetched += held
        self.keys.insert_many(stored)
        # Fetched vs stored: each event should be fetched once (docs/cluster-bench.md).
        self.metrics.inc("recon_events_stored_total", fetched)
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
                self.transfer.expire_claims()
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
            if event.kind == "disconnected":
                state = self.peers.get(event.peer_id)
                if state is not None and state.backoff_until <= time.monotonic():
                    del self.peers[event.peer_id]  # nothing worth remembering
            if event.kind == "connected":
                self._state(event.peer_id)
                # A fresh connection is the moment a late joiner needs to catch up.
                self.poke()

    def _choose_peer(self) -> str | None:
        """CIP-124 random peer sync order: weighted by interest overlap, inversely by latency."""
        now = time.monotonic()
        candidates: list[tuple[str, float]] = []
        for peer in self.host.connected_peers():
            state = self._state(peer)
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
        state = self._state(peer)
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
        self.metrics.observe("recon_session_seconds", time.monotonic() - started,
                             role="initiator")
        if stats.fetched:
            log.info("recon fetched events", extra=kv(
                peer=peer, events=stats.fetched, seconds=round(time.monotonic() - started, 3)))
        return stats

    def _failed(self, peer: str, state: PeerSyncState, exc: Exception) -> None:
        if isinstance(exc, RemoteProtocolError):
            self.metrics.inc("recon_protocol_errors_total", reason=exc.reason[:80])
        if isinstance(exc, RemoteProtocolError | ReconAbort) and self.standing is not None:
            self.standing.penalise(peer, "protocol")
        state.failures += 1
        state.backoff_until = time.monotonic() + min(300.0, 2.0 ** state.failures)
        self.metrics.inc("recon_errors_total", kind=type(exc).__name__)
        log.info("recon session failed", extra=kv(peer=peer, error=str(exc) or type(exc).__name__))

    # -- responding ----------------------------------------------------------------------------

    async def _respond(self, stream: FramedStream) -> None:
        peer = stream.peer_id
        state = self._state(peer)
        stats = SessionStats()
        if self._declines(peer) or len(self._serving) + len(self._busy) >= self.max_sessions:
            async with stream:
                with trio.move_on_after(self.session_timeout_s):
                    await stream.send(bytes([BUSY]))
            self.metrics.inc("recon_sessions_declined_total", role="responder")
            return
        self._serving.add(peer)
        started = time.monotonic()
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
        self.metrics.observe("recon_session_seconds", time.monotonic() - started,
                             role="responder")

    def _state(self, peer: str) -> PeerSyncState:
        """The peer's sync state; the table is bounded (connected peers come first)."""
        state = self.peers.get(peer)
        if state is None:
            if len(self.peers) >= MAX_PEER_STATES:
                connected = set(self.host.connected_peers())
                now = time.monotonic()
                self.peers = {p: s for p, s in self.peers.items()
                              if p in connected or s.backoff_until > now}
                while len(self.peers) >= MAX_PEER_STATES:
                    del self.peers[next(iter(self.peers))]
            state = self.peers[peer] = PeerSyncState()
        return state

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
                    room = self.max_missing_keys - len(stats.missing)
                    if len(event.keys) > room:
                        # Bounded memory for keys we do not have: the rest waits for a later
                        # session (an honest catch-up just takes more sessions).
                        self.metrics.inc("recon_missing_dropped_total", len(event.keys) - room)
                    stats.missing.extend(event.keys[: max(room, 0)])
            if reply is not None:
                await stream.send(bytes([RECON]) + reply)

    async def _fetch(self, stream: FramedStream, stats: SessionStats) -> None:
        held = await self.store.read(existing_keys, stats.missing) if stats.missing else set()
        stats.missing = [k for k in stats.missing if k not in held]
        await self.transfer.fetch(stream, stats)

    async def _serve(self, stream: FramedStream, stats: SessionStats) -> None:
        # A peer cannot want more than we hold (plus one batch of slack for races).
        await self.transfer.serve(stream, len(self.keys) + self.fetch_batch, stats)
