"""SDS over GossipSub: one ``SdsChannel`` per configured channel, driven by the daemon.

Gossip, Recon and the fetch protocol (``channel_ingest.py``) all feed events into the
channels; every delivery is
persisted through the batched ``EventStore``; the channels' own outgoing messages (resends, sync
messages, repair answers) are published on the channel's topic.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Connection

from node.p2p import P2PHost
from node.replication.channel_ingest import FetchedIngest
from node.replication.channel_metrics import EVENT_COUNTERS, describe_channel_metrics
from node.replication.channel_state import ChannelMaker
from node.replication.clock import Clock
from node.replication.delivered_reads import DeliveredReads
from node.replication.gossip_outbox import GossipOutbox, topic_of
from node.store.events import EventStore
from node.store.reports import Failed
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import EventRecord, put_state
from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.gossip import (
    GossipGate,
    GossipLimits,
    SenderPolicy,
    publisher_pays,
)
from sync.ingest import IngestSpec
from sync.peerscore import penalty_of
from sync.recon.eventid import CIP124_DRAFT
from sync.replication import sds_penalty
from sync.sds import (
    Delivered,
    Evicted,
    MissingDependencies,
    MissingEntry,
    RepairRequested,
    SdsChannel,
    SdsConfig,
)
from sync.sds.state import encode_state
from sync.sds.waku import send_reads
from sync.stored_event import record_of_delivered

__all__ = ["ChannelService", "UnknownChannel"]

log = logging.getLogger("syncnode.channels")
STATE_SAVE_INTERVAL_S = 5.0


class UnknownChannel(KeyError):
    pass


MissingHandler = Callable[[str, Sequence[MissingEntry]], None]
#: (peer, penalty reason): a peer sent us something we rejected (``sync.peerscore``).
PenaltyHandler = Callable[[str, str], object]


class ChannelService:
    def __init__(
        self,
        *,
        host: P2PHost,
        store: EventStore,
        metrics: Metrics,
        key: Ed25519PrivateKey,
        peer_id: str,
        network_id: int,
        channels: Sequence[str],
        sds_config: SdsConfig,
        clock: Clock,
        on_missing: MissingHandler | None = None,
        allowed_senders: frozenset[str] | None = None,
        gossip_linger_s: float = 0.0,
        event_id_layout: str = CIP124_DRAFT,
        profiles: Mapping[str, str] | None = None,
        writers: Mapping[str, frozenset[str]] | None = None,
        gossip_limits: GossipLimits | None = None,
        on_penalty: PenaltyHandler | None = None,
        member_estimate: int = 0,
    ) -> None:
        self.host = host
        self.clock = clock
        self.outbox = GossipOutbox(host, network_id, metrics, self.clock, gossip_linger_s,
                                   gossip_limits)
        self.store = store
        self.metrics = metrics
        self.key = key
        self.peer_id = peer_id
        self.network_id = network_id
        self.event_id_layout = event_id_layout
        self.names = list(channels)
        self.sds_config = sds_config
        # channel -> SDS profile (sync.sds.profile); absent: "syncnode".
        self.profiles = {name: "syncnode" for name in self.names} | dict(profiles or {})
        self.maker = ChannelMaker(peer_id, key, sds_config, self.profiles, store, metrics)
        #: Answers the channels' questions about old delivered ids between their steps.
        self.reads = DeliveredReads(store, metrics)
        self.on_missing = on_missing
        self.on_penalty = on_penalty
        #: sds.member_estimate: > 0 overrides what the node counts (``estimate_members``).
        self.member_estimate = member_estimate
        # Closed group: only members' events are accepted, whoever relays them.
        self.allowed_senders = allowed_senders | {peer_id} if allowed_senders else None
        self.policy = SenderPolicy(peer_id, self.allowed_senders, dict(writers or {}))
        limits = gossip_limits or GossipLimits()
        self.gate = GossipGate(self.policy, GossipLimits(
            peer_rate=limits.peer_rate, peer_burst=limits.peer_burst,
            max_peers=limits.max_peers, max_item_bytes=sds_config.max_message_size))
        self.channels: dict[str, SdsChannel] = {}
        self._dirty: set[str] = set()
        #: The one path of events fetched by Recon or by id into the channels.
        self.fetched = FetchedIngest(
            channels=self.channels, policy=self.policy, store=store, metrics=metrics,
            reads=self.reads, spec=IngestSpec(network_id, event_id_layout, self.profiles,
                                              sds_config.max_message_size),
            max_lamport_ahead_ms=sds_config.max_lamport_ahead_ms, clock=self.clock,
            steps=self)
        self._wake = trio.Event()
        describe_channel_metrics(metrics, self.channels, store)

    # -- start-up --------------------------------------------------------------------------

    async def load(self) -> None:
        """Restore every channel's state and log from the database (or start it fresh)."""
        now = self.clock.wall()
        for name in self.names:
            self.channels[name] = await self.maker.restore(name, now)

    def _count_unsigned(self, ch: SdsChannel, name: str) -> None:
        # A waku channel took a message nobody signed (docs/interop.md, the trust trade-off).
        if ch.setup.profile.is_waku:
            self.metrics.inc("sds_unsigned_accepted_total", channel=name)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for name in self.names:
                receiver = await self.host.subscribe(topic_of(self.network_id, name))
                nursery.start_soon(self._gossip_loop, name, receiver)
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self.outbox.run)
            nursery.start_soon(self._state_loop)

    # -- API --------------------------------------------------------------------------------

    def channel(self, name: str) -> SdsChannel:
        try:
            return self.channels[name]
        except KeyError:
            raise UnknownChannel(name) from None

    async def publish(
        self, name: str, content: bytes,
        also: Callable[[Connection, Delivered], None] | None = None,
    ) -> Delivered:
        """Send ``content``; returns once the event is committed to the database.

        ``also(conn, delivered)`` is written in the event's own transaction (idempotency keys).
        """
        sent, error = await self.publish_many(name, [content], also)
        if error is not None:
            raise error
        return sent[0]

    async def publish_many(
        self, name: str, contents: Sequence[bytes],
        also: Callable[[Connection, Delivered], None] | None = None,
    ) -> tuple[list[Delivered], LocalProtocolError | None]:
        """Send ``contents`` in order as one store item (one commit, at the durable level);
        returns the events once committed. A content SDS refuses (a waku channel's repeated
        payload) ends the batch: the events before it are committed and returned with the
        error (raised when it is the first; any other error is raised after that commit).
        ``also`` runs in that transaction with the last.
        """
        ch = self.channel(name)
        started = self.clock.now()
        read = send_reads(ch.layers.log, contents) if ch.setup.profile.is_waku else None
        if read is not None:  # a waku channel: were these payloads sent already?
            await self.reads.answer(name, ch, read)
        now = self.clock.wall()
        wires: list[bytes] = []
        error: Exception | None = None
        for content in contents:
            try:
                wires.append(ch.send(content, now))
            except Exception as exc:  # the events SDS took before it are still committed
                error = exc
                break
        if not wires:
            assert error is not None
            raise error
        records, delivered = self._process(name)
        # send() delivers our own messages at once: the last len(wires) of ours in this drain.
        own = [d for d in delivered if d.sender_id == self.peer_id][-len(wires):]
        await self.store.append(
            records, None if also is None else (lambda conn: also(conn, own[-1]))
        )
        self.metrics.observe("publish_commit_seconds", self.clock.now() - started)
        for wire in wires:
            self.outbox.queue(name, wire)
        self.metrics.inc("events_published_total", len(wires), channel=name)
        if error is not None and not isinstance(error, LocalProtocolError):
            raise error
        return own, error

    def is_missing(self, message_id: str) -> bool:
        return any(ch.layers.incoming.is_missing(message_id) for ch in self.channels.values())

    # -- loops -------------------------------------------------------------------------------

    async def _gossip_loop(self, name: str, receiver: trio.MemoryReceiveChannel[object]) -> None:
        ch = self.channels[name]
        async with receiver:
            async for message in receiver:
                data: bytes = message.data  # type: ignore[attr-defined]
                peer: str = message.from_peer  # type: ignore[attr-defined]
                forwarder: str | None = getattr(message, "forwarder", None)
                direct = publisher_pays(peer, forwarder)
                self.metrics.inc("gossip_bytes_received_total", len(data))
                now = self.clock.wall()
                # The budget is the neighbour's that handed it to us: that one is authenticated
                # by the connection, the publisher field is not (unsigned gossip). An honest
                # neighbour relaying somebody's flood is throttled with it but not penalised:
                # GossipSub forwards before we validate (sync.gossip). It is charged when the
                # message came off its stream, not when this loop got to it: a loop that fell
                # behind (a busy node storing a burst) would otherwise take a paced burst in
                # clumps and charge our own delay to the peer.
                arrived = getattr(message, "received_at", None) or now
                admitted = self.gate.admit(data, forwarder or peer, arrived, publisher=peer)
                for exc, penalty in admitted.rejected:
                    self.reject(exc, peer, penalty, penalise=direct and penalty is not None)
                for item in admitted.items:
                    try:
                        # A question only the store answers (an old id): read, run again.
                        if await self.reads.received(name, ch, ch.receive(item, now, peer)):
                            self._count_unsigned(ch, name)
                    except RemoteProtocolError as exc:
                        self.reject(exc, peer, penalise=direct)
                if admitted.items:
                    self.after_input(name)

    def undeliver(self, report: Failed) -> None:
        """Records no backend could store (the store's report, read by the driver): no
        longer delivered, so a resend, a repair or Recon may bring them again."""
        for record in report.records:
            ch = self.channels.get(record.channel)
            if ch is not None and ch.forget(record.message_id):
                self.metrics.inc("events_store_failed_total", channel=record.channel)

    def reject(self, exc: RemoteProtocolError, peer: str | None,
                penalty: str | None = None, *, penalise: bool = True) -> None:
        """Count a refused input and charge ``peer``."""
        # The label and the penalty follow from the error's kind (sync.errors.ErrorKind).
        self.metrics.inc("events_rejected_total", reason=exc.kind.value)
        log.info("rejected event", extra=kv(peer=peer or "?", reason=exc.reason))
        if penalise and peer is not None:
            self.penalise(peer, penalty or penalty_of(exc.kind))

    def penalise(self, peer: str, penalty: str) -> None:
        if self.on_penalty is not None:
            self.on_penalty(peer, penalty)

    def mark_dirty(self, name: str) -> None:
        """Channel ``name``'s state changed: saved with the next round."""
        self._dirty.add(name)

    def after_input(self, name: str, *, fetched: bool = False) -> None:
        """Store what channel ``name`` delivered after an input, act on what else it reported.

        ``fetched``: the input was a fetched batch (Recon, fetch by id). What SDS's full step
        delivered of it (recent events: the bulk path takes only old ones) is then committed
        as soon as the store is free, like the bulk path's records: a relayed batch gathers
        for ``storage.relayed_batch_delay_ms`` first, which a catch-up of recent events (a
        restarted peer's burst) waited once per fetched batch, its last one included."""
        records, _ = self._process(name)
        if records:
            self.store.submit(records, prompt=fetched)

    def run_timers(self, name: str, now: float) -> None:
        """Run channel ``name``'s timers due at ``now``: send the messages they made, store
        what they delivered."""
        for datagram in self.channels[name].handle_timer(now):
            self.outbox.queue(name, datagram)
        self.after_input(name)

    def _process(self, name: str) -> tuple[list[EventRecord], list[Delivered]]:
        ch = self.channels[name]
        records: list[EventRecord] = []
        delivered: list[Delivered] = []
        for ev in ch.events():
            if isinstance(ev, Delivered):
                delivered.append(ev)
                records.append(record_of_delivered(self.network_id, name, ev, self.event_id_layout))
                self.metrics.inc("events_delivered_total", channel=name)
            elif isinstance(ev, RepairRequested):
                self.metrics.inc("sds_repairs_requested_total", len(ev.message_ids))
            elif (penalty := sds_penalty(ev)) is not None:
                self.penalise(penalty.peer, penalty.penalty)
            elif isinstance(ev, Evicted):
                self.metrics.inc("sds_evicted_total", buffer=ev.buffer)
            elif isinstance(ev, MissingDependencies):
                self.metrics.inc("sds_missing_total", len(ev.entries))
                if self.on_missing is not None:
                    self.on_missing(name, ev.entries)
            else:
                counter = EVENT_COUNTERS.get(type(ev))
                if counter:
                    self.metrics.inc(counter)
        self._dirty.add(name)
        self._wake.set()
        return records, delivered

    async def _timer_loop(self) -> None:
        while True:
            now = self.clock.wall()
            next_at = math.inf
            for name, ch in self.channels.items():
                due = ch.get_timer()
                if due is not None and due <= now:
                    self.run_timers(name, now)
                    due = ch.get_timer()
                if due is not None:
                    next_at = min(next_at, due)
            self._wake = trio.Event()
            with trio.move_on_after(min(max(next_at - self.clock.wall(), 0.005), 5.0)):
                await self._wake.wait()

    def estimate_members(self) -> None:
        """Give each channel the node's member estimate (SDS-R response groups are
        ``N div 128 + 1``; the channel takes the larger of this and the senders it heard)."""
        for name, ch in self.channels.items():
            members = self.member_estimate
            if not members:  # the closed group, else our neighbours on the topic and us
                members = len(self.allowed_senders or ()) or len(self.host.gossip_peers(
                    topic_of(self.network_id, name))) + 1
            ch.layers.repair.members.set_external(members)

    async def _state_loop(self) -> None:
        try:
            while True:
                self.estimate_members()
                await trio.sleep(STATE_SAVE_INTERVAL_S)
                await self.save_state()
        finally:
            with trio.CancelScope(shield=True):
                await self.save_state(all_channels=True)

    async def save_state(self, *, all_channels: bool = False) -> None:
        names = list(self.channels) if all_channels else sorted(self._dirty)
        self._dirty.clear()
        now_ms = int(self.clock.wall() * 1000)
        for name in names:
            await self.store.write(put_state, f"sds/{name}",
                                   encode_state(self.channels[name].snapshot()), now_ms)


