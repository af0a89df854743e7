"""SDS over GossipSub: one ``SdsChannel`` per configured channel, driven by the daemon.

Gossip, Recon and the fetch protocol all feed events into the channels; every delivery is
persisted through the batched ``EventStore``; the channels' own outgoing messages (resends, sync
messages, repair answers) are published on the channel's topic.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Connection

from node.logs import kv
from node.metrics import Metrics
from node.p2p.host import P2PError, P2PHost
from node.store import EventStore
from storage import EventRecord, get_state, put_state, read_channel_newest
from sync.errors import RemoteProtocolError
from sync.gossip import (
    MAX_BATCH_BYTES,
    MAX_BATCH_ITEMS,
    GossipGate,
    GossipLimits,
    SenderCheck,
    SenderPolicy,
    pack_batch,
    penalty_of,
)
from sync.ingest import VerifiedBatch
from sync.linger import Linger
from sync.recon.eventid import CIP124_DRAFT
from sync.sds import (
    Acknowledged,
    Delivered,
    DeliveredLookup,
    DependencyLost,
    Evicted,
    MissingDependencies,
    MissingEntry,
    PossiblyAcknowledged,
    RepairAnswered,
    RepairRequested,
    ResendExhausted,
    SdsChannel,
    SdsConfig,
    SignedEvent,
)
from sync.sds.clock import check_lamport, lamport_bound
from sync.sds.profile import decode_event_in, peek_event
from sync.stored_event import record_of_delivered, record_of_event

__all__ = ["ChannelService", "UnknownChannel", "topic_of"]

log = logging.getLogger("syncnode.channels")
STATE_SAVE_INTERVAL_S = 5.0
_EVENT_COUNTERS: dict[type, str] = {
    Acknowledged: "sds_acknowledged_total",
    PossiblyAcknowledged: "sds_possibly_acknowledged_total",
    DependencyLost: "sds_dependencies_lost_total",
    ResendExhausted: "sds_resend_exhausted_total",
    RepairAnswered: "sds_repairs_answered_total",
}


CHANNEL_METRICS = {
    "events_delivered_total": "Events delivered into a channel's causal log (own and received), "
                              "by channel",
    "events_published_total": "Events published through this node's API, by channel",
    "events_rejected_total": "Events from peers refused (bad signature, wrong network, foreign "
                             "sender, malformed...), by reason",
    "sds_missing_total": "Causal dependencies found missing (each is then fetched by id)",
    "sds_acknowledged_total": "Own messages acknowledged by a peer's causal history",
    "sds_possibly_acknowledged_total": "Own messages seen in peers' bloom filters (probably "
                                       "acknowledged)",
    "sds_resend_exhausted_total": "Own messages given up after sds.max_resends resends",
    "sds_repairs_requested_total": "Repair requests sent (SDS-R), one per message id asked for "
                                   "in each outgoing message",
    "sds_repairs_answered_total": "Messages this node rebroadcast because a peer asked (SDS-R)",
    "sds_dependencies_lost_total": "Dependencies still missing after sds.lost_timeout_s, "
                                   "declared lost",
    "gossip_bytes_sent_total": "Bytes of gossip messages this node published",
    "gossip_bytes_received_total": "Bytes of gossip messages received",
    "sds_evicted_total": "Entries dropped or refused by a bounded SDS buffer (waiting, missing) "
                         "to stay within its limits, by buffer",
    "events_store_failed_total": "Delivered events the database could not store (delivery "
                                 "undone), by channel",
    "sds_clock_recovered_total": "Channels whose persisted Lamport clock broke the clock rule at "
                                 "start-up",
    "sds_unsigned_accepted_total": "Unsigned messages taken on a channel of the waku SDS profile "
                                   "(docs/interop.md), by channel",
    "sds_store_lookups_total": "Questions SDS channels asked the database about delivered ids "
                               "older than the window they keep in memory (sds.delivered_window)",
}
UNLABELLED_FROM_ZERO = frozenset(
    n for n in CHANNEL_METRICS
    if n.startswith(("sds_", "gossip_"))
    and n not in ("sds_evicted_total", "sds_resends_total", "sds_unsigned_accepted_total")
)


class UnknownChannel(KeyError):
    pass


def topic_of(network_id: int, channel: str) -> str:
    return f"/syncnode/{network_id}/sds/{channel}"


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
        on_missing: MissingHandler | None = None,
        allowed_senders: frozenset[str] | None = None,
        gossip_linger_s: float = 0.0,
        event_id_layout: str = CIP124_DRAFT,
        profiles: Mapping[str, str] | None = None,
        writers: Mapping[str, frozenset[str]] | None = None,
        gossip_limits: GossipLimits | None = None,
        on_penalty: PenaltyHandler | None = None,
    ) -> None:
        self.host = host
        self._linger = Linger(gossip_linger_s)
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
        self.on_missing = on_missing
        self.on_penalty = on_penalty
        # Closed group: only members' events are accepted, whoever relays them.
        self.allowed_senders = allowed_senders | {peer_id} if allowed_senders else None
        self.policy = SenderPolicy(peer_id, self.allowed_senders, dict(writers or {}))
        limits = gossip_limits or GossipLimits()
        self.gate = GossipGate(self.policy, GossipLimits(
            peer_rate=limits.peer_rate, peer_burst=limits.peer_burst,
            max_peers=limits.max_peers, max_item_bytes=sds_config.max_message_size))
        self.channels: dict[str, SdsChannel] = {}
        self._dirty: set[str] = set()
        self._wake = trio.Event()
        self._outbox_send, self._outbox = trio.open_memory_channel[tuple[str, bytes]](math.inf)
        for name, help_text in CHANNEL_METRICS.items():
            metrics.describe(name, "counter", help_text)
            if name in UNLABELLED_FROM_ZERO:  # for rate() from the first scrape
                metrics.inc(name, 0)
        metrics.counter_fn("sds_resends_total",
                           lambda: float(sum(ch.resends for ch in self.channels.values())),
                           "Own messages sent again because no acknowledgement came in time")
        metrics.counter_fn(
            "events_duplicate_total",
            lambda: float(store.duplicate_events
                          + sum(ch.duplicates_received for ch in self.channels.values())),
            "Events received again after they were delivered (resends, repairs, one event by "
            "gossip and by Recon): dropped, not stored twice")
        metrics.describe_histogram("publish_commit_seconds",
                                   "Time from a local publish to its event being committed to "
                                   "the database")
        store.on_failure(self._undeliver)

    # -- start-up --------------------------------------------------------------------------

    async def load(self) -> None:
        """Restore every channel's state and log from the database (or start it fresh)."""
        now = time.time()
        cfg = self.sds_config
        # Only the newest part of the log: what the channel keeps in memory (its delivered
        # window covers the bloom filter, the history tail and the repair cache); the
        # database answers for older ids. Bounded time and memory however long the log is.
        limit = max(cfg.delivered_window, cfg.repair_cache_size)
        for name in self.names:
            state = await self.store.read(get_state, f"sds/{name}")
            rows = await self.store.read(read_channel_newest, name, limit)
            log_entries = [(e.message_id, e.lamport, e.sender) for e in rows]
            cached = rows[len(rows) - cfg.repair_cache_size :] if cfg.repair_cache_size else []
            wires = [e.wire for e in cached]
            del rows, cached
            if state is None:
                if not log_entries:
                    self.channels[name] = self._fresh(name, now)
                    continue
                state = self._fresh(name, now).export_state()
            restore = functools.partial(
                SdsChannel.restore, log=log_entries, cached_wires=wires, config=self._config(name),
                rng=random.Random(), now=now, lookup=self._lookup_of(name),
                log_truncated=len(log_entries) >= limit,
            )
            try:
                ch = restore(state, self.key)
            except Exception:  # a corrupt state blob must not keep the node down
                log.exception("cannot restore channel state; starting it afresh from the log",
                              extra=kv(channel=name))
                ch = restore(self._fresh(name, now).export_state(), self.key)
            self.channels[name] = ch
            if ch.clock_recovered:
                self.metrics.inc("sds_clock_recovered_total", channel=name)
                log.warning("persisted Lamport clock out of range; reset within the clock rule",
                            extra=kv(channel=name, lamport=ch.lamport))
            log.info("channel restored", extra=kv(channel=name, events_loaded=len(log_entries),
                                                  lamport=ch.lamport))

    def _fresh(self, name: str, now: float) -> SdsChannel:
        return SdsChannel(name, self.peer_id, self.key, self._config(name), random.Random(), now,
                          lookup=self._lookup_of(name))

    def _config(self, name: str) -> SdsConfig:
        return replace(self.sds_config, profile=self.profiles.get(name, "syncnode"))

    def _count_unsigned(self, ch: SdsChannel, name: str) -> None:
        # A waku channel took a message nobody signed (docs/interop.md, the trust trade-off).
        if ch.profile.is_waku:
            self.metrics.inc("sds_unsigned_accepted_total", channel=name)
    def _lookup_of(self, name: str) -> DeliveredLookup:
        store = self.store

        def lookup(ids: Sequence[str]) -> set[str]:
            self.metrics.inc("sds_store_lookups_total")
            return store.stored_ids(name, ids)

        return lookup

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for name in self.names:
                receiver = await self.host.subscribe(topic_of(self.network_id, name))
                nursery.start_soon(self._gossip_loop, name, receiver)
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self._publish_loop)
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
        ch = self.channel(name)
        started = time.monotonic()
        wire = ch.send(content, time.time())
        records, delivered = self._process(name)
        # send() delivers our own message at once; it is the only delivery of ours in this drain.
        own = [d for d in delivered if d.sender_id == self.peer_id][-1]
        await self.store.append(
            records, None if also is None else (lambda conn: also(conn, own))
        )
        self.metrics.observe("publish_commit_seconds", time.monotonic() - started)
        self._queue_gossip(name, wire)
        self.metrics.inc("events_published_total", channel=name)
        return own

    def ingest(
        self, wire: bytes, peer: str | None, now: float | None = None,
        verified: SignedEvent | None = None,
    ) -> str | None:
        """Feed an event fetched by Recon or by id; its message id, or None if rejected.

        ``verified``: the event as already decoded and verified (in a worker thread), so that
        its signature is not checked a second time here.
        """
        try:
            parsed = verified or peek_event(wire, max_size=self.sds_config.max_message_size)
            name = parsed.channel_id
            verdict = self.policy.check(parsed.sender_id, name, bool(parsed.content))
            ch = self.channels.get(name)
            if ch is None:
                raise RemoteProtocolError(f"event for a channel we do not replicate: {name!r}")
            if verdict is SenderCheck.OWN:
                # SDS ignores echoes of our own messages; one we no longer hold (a wiped
                # database, say) is stored directly once its signature checks out.
                own = verified or decode_event_in(ch.profile.name, wire)
                if own.lamport is not None and not ch.has_delivered(own.message_id,
                                                                    own.lamport):
                    self.store.submit([record_of_event(self.network_id, own, self.event_id_layout)])
                return own.message_id
            when = time.time() if now is None else now
            if verified is not None:
                ch.receive_event(verified, when, peer=peer)
            else:
                ch.receive(wire, when, peer=peer)
            self._count_unsigned(ch, name)
        except RemoteProtocolError as exc:
            self._reject(exc, peer)
            return None
        self._after_input(name)
        return parsed.message_id

    def ingest_verified(self, batch: VerifiedBatch, wires: Sequence[bytes],
                        order: Sequence[int], peer: str, now: float | None = None) -> int:
        """Feed events the ingest workers decoded and verified (``sync.ingest``); ``order``:
        the positions to take, in causal (Lamport) order. Old events whose dependencies are
        delivered take SDS's bulk path (``SdsChannel.deliver_settled``) and go to the store
        as one submission; the rest take ``ingest``'s full step. Returns how many were
        refused (clock rule, roles, closed group, unknown channel), counted and charged to
        ``peer`` as ``ingest`` does."""
        when = time.time() if now is None else now
        max_ahead = self.sds_config.max_lamport_ahead_ms
        bound = lamport_bound(when, max_ahead)
        senders, lamports, names = batch.senders, batch.lamports, batch.channels
        refused = 0
        by_channel: dict[str, list[int]] = {}
        full: list[int] = []
        for i in order:
            name = names[i]
            try:
                if name not in self.channels:
                    raise RemoteProtocolError(f"event for a channel we do not replicate: {name!r}")
                verdict = self.policy.check(senders[i], name, batch.has_content[i])
                if not 0 <= lamports[i] <= bound:
                    check_lamport(lamports[i], when, max_ahead)  # raises, with the reason
            except RemoteProtocolError as exc:
                self._reject(exc, peer)
                refused += 1
                continue
            if verdict is SenderCheck.OWN or not batch.has_content[i]:
                full.append(i)
            else:
                by_channel.setdefault(name, []).append(i)
        records: list[EventRecord] = []
        for name, taken in by_channel.items():
            done, rest = self.channels[name].deliver_settled(
                [batch.message_ids[i] for i in taken], [senders[i] for i in taken],
                [lamports[i] for i in taken], [batch.histories[i] for i in taken], when)
            for pos in done:
                i = taken[pos]
                records.append(EventRecord(batch.keys[i], batch.message_ids[i], name, senders[i],
                                           lamports[i], batch.canonical.get(i, wires[i]),
                                           batch.lanes[i]))
            full.extend(taken[pos] for pos in rest)
            if done:
                self.metrics.inc("events_delivered_total", len(done), channel=name)
                self._dirty.add(name)
        if records:
            self.store.submit_fetched(records)
        if full:
            rank = {i: r for r, i in enumerate(order)}
            full.sort(key=rank.__getitem__)
        for i in full:
            wire = batch.canonical.get(i, wires[i])
            # Verified by the worker: decoded again only for the full protocol step.
            try:
                event = decode_event_in(self.channels[names[i]].profile.name, wire,
                                        max_size=len(wire), verify_signature=False)
            except RemoteProtocolError as exc:  # not after the worker's check; never trusted
                self._reject(exc, peer)
                refused += 1
                continue
            if self.ingest(wire, peer, when, verified=event) is None:
                refused += 1
        return refused

    def is_missing(self, message_id: str) -> bool:
        return any(ch.is_missing(message_id) for ch in self.channels.values())

    # -- loops -------------------------------------------------------------------------------

    async def _gossip_loop(self, name: str, receiver: trio.MemoryReceiveChannel[object]) -> None:
        ch = self.channels[name]
        async with receiver:
            async for message in receiver:
                data: bytes = message.data  # type: ignore[attr-defined]
                peer: str = message.from_peer  # type: ignore[attr-defined]
                # Only the publisher itself, handing it to us directly, pays (GossipMessage).
                forwarder: str | None = getattr(message, "forwarder", None)
                direct = forwarder == peer
                self.metrics.inc("gossip_bytes_received_total", len(data))
                now = time.time()
                # The budget is the neighbour's that handed it to us: that one is authenticated
                # by the connection, the publisher field is not (unsigned gossip). An honest
                # neighbour relaying somebody's flood is throttled with it but not penalised:
                # GossipSub forwards before we validate (sync.gossip).
                admitted = self.gate.admit(data, forwarder or peer, now, publisher=peer)
                for reason, penalty in admitted.rejected:
                    self._reject(RemoteProtocolError(reason), peer, penalty,
                                 penalise=direct and penalty is not None)
                for item in admitted.items:
                    try:
                        ch.receive(item, now, peer=peer)
                        self._count_unsigned(ch, name)
                    except RemoteProtocolError as exc:
                        self._reject(exc, peer, penalise=direct)
                if admitted.items:
                    self._after_input(name)

    def _undeliver(self, records: Sequence[EventRecord]) -> None:
        for record in records:
            ch = self.channels.get(record.channel)
            if ch is not None and ch.forget(record.message_id):
                self.metrics.inc("events_store_failed_total", channel=record.channel)

    def _reject(self, exc: RemoteProtocolError, peer: str | None,
                penalty: str | None = None, *, penalise: bool = True) -> None:
        reason = exc.reason.split(":")[0][:60]
        self.metrics.inc("events_rejected_total", reason=reason)
        log.info("rejected event", extra=kv(peer=peer or "?", reason=exc.reason))
        if penalise and peer is not None and self.on_penalty is not None:
            self.on_penalty(peer, penalty or penalty_of(exc.reason))

    def _after_input(self, name: str) -> None:
        records, _ = self._process(name)
        if records:
            self.store.submit(records)

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
            elif isinstance(ev, Evicted):
                self.metrics.inc("sds_evicted_total", buffer=ev.buffer)
            elif isinstance(ev, MissingDependencies):
                self.metrics.inc("sds_missing_total", len(ev.entries))
                if self.on_missing is not None:
                    self.on_missing(name, ev.entries)
            else:
                counter = _EVENT_COUNTERS.get(type(ev))
                if counter:
                    self.metrics.inc(counter)
        for datagram in ch.datagrams_to_send():
            self._queue_gossip(name, datagram)
        self._dirty.add(name)
        self._wake.set()
        return records, delivered

    async def _timer_loop(self) -> None:
        while True:
            now = time.time()
            next_at = math.inf
            for name, ch in self.channels.items():
                due = ch.get_timer()
                if due is not None and due <= now:
                    ch.handle_timer(now)
                    self._after_input(name)
                    due = ch.get_timer()
                if due is not None:
                    next_at = min(next_at, due)
            self._wake = trio.Event()
            with trio.move_on_after(min(max(next_at - time.time(), 0.005), 5.0)):
                await self._wake.wait()

    def _queue_gossip(self, name: str, data: bytes) -> None:
        self._linger.note(trio.current_time())
        self._outbox_send.send_nowait((name, data))

    async def _publish_loop(self) -> None:
        async for name, data in self._outbox:
            delay = self._linger.delay(trio.current_time())
            if delay:  # busy: let the messages due meanwhile join this gossip message
                await trio.sleep(delay)
            queued: dict[str, list[bytes]] = {name: [data]}
            size = len(data)
            while size < MAX_BATCH_BYTES and sum(map(len, queued.values())) < MAX_BATCH_ITEMS:
                try:
                    more_name, more = self._outbox.receive_nowait()
                except trio.WouldBlock:
                    break
                queued.setdefault(more_name, []).append(more)
                size += len(more)
            for channel, items in queued.items():
                payload = pack_batch(items)
                try:
                    await self.host.publish(topic_of(self.network_id, channel), payload)
                    self.metrics.inc("gossip_bytes_sent_total", len(payload))
                except P2PError as exc:
                    # Only an oversized payload fails here; the 512 KiB content limit of every
                    # local publisher and the batch limit keep payloads under the gossip limit,
                    # so there is no counter that could never move (Recon carries the events).
                    log.warning("publish failed", extra=kv(channel=channel, error=str(exc)))

    async def _state_loop(self) -> None:
        try:
            while True:
                await trio.sleep(STATE_SAVE_INTERVAL_S)
                await self.save_state()
        finally:
            with trio.CancelScope(shield=True):
                await self.save_state(all_channels=True)

    async def save_state(self, *, all_channels: bool = False) -> None:
        names = list(self.channels) if all_channels else sorted(self._dirty)
        self._dirty.clear()
        now_ms = int(time.time() * 1000)
        for name in names:
            await self.store.write(put_state, f"sds/{name}", self.channels[name].export_state(),
                                   now_ms)


