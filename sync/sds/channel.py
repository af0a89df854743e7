"""``SdsChannel``: SDS and SDS-R for one (channel, participant), sans-IO.

Its surface is the protocol's steps: ``send`` / ``receive`` / ``receive_event`` /
``deliver_settled`` / ``delivered_read`` / ``forget`` / ``handle_timer`` in, ``events()``,
``get_timer()`` and the datagrams ``handle_timer`` returns out; ``snapshot()`` and ``restore``
for persistence (a ``ChannelState``), and two read-only views: ``setup`` (what it was made
with) and ``layers``. ``now`` is always float seconds since the epoch; the Lamport clock works
in epoch milliseconds.

The channel decides what a step does and builds the messages; its layers hold the state, each
an object of its own (``sync.sds.layers``): ``log`` (the delivered ids,
``sync.sds.delivered``: also the driver's reads), ``history`` (heads and tail),
``incoming`` (delivery, the dependency buffer, the clock), ``outgoing`` (our unacknowledged
messages), ``repair`` (SDS-R and the member estimate), ``signatures`` (verified ones) and
``stats`` (counters).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, Set
from functools import partial

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.errors import ErrorKind, LocalProtocolError, RemoteProtocolError
from sync.identity import peer_id_of
from sync.sds.ackfilter import AckFilter
from sync.sds.acks import FilterEvidence
from sync.sds.bloom import RollingBloomFilter
from sync.sds.channel_setup import ChannelSetup
from sync.sds.clock import LAMPORT_MAX, check_lamport
from sync.sds.config import SdsConfig
from sync.sds.delivered import (
    STALE_ANSWERS,
    DeliveredIndex,
    DeliveredRead,
    ReadDelivered,
)
from sync.sds.events import (
    EphemeralReceived,
    RepairAnswered,
    RepairRefused,
    RepairRequested,
    SdsEvent,
)
from sync.sds.history import CausalHistory
from sync.sds.incoming import Incoming
from sync.sds.layers import ChannelLayers
from sync.sds.message import (
    HistoryRef,
    SignedEvent,
    decode_event,
    transmission_suffix,
    verify_repair,
)
from sync.sds.outgoing import OutgoingBuffer
from sync.sds.persist import load_log, load_state, snapshot_of
from sync.sds.profile import SdsProfile, profile_of
from sync.sds.repair_buffers import RepairBuffers
from sync.sds.signatures import VerifiedSignatures
from sync.sds.state import ChannelState, LogEntry, decode_state
from sync.sds.stats import ChannelStats
from sync.sds.sync_schedule import REPAIR_SYNC_KEY, SyncSchedule
from sync.sds.timers import TimerKind, TimerQueue
from sync.sds.waku import waku_message_id

__all__ = ["LAMPORT_LIMIT", "SdsChannel"]

#: ``_accept``'s answer from the store while memory holds the whole log (no question).
_NOTHING_STORED: frozenset[str] = frozenset()

#: Received timestamps at or above this are rejected whatever the clock (``sync.sds.clock``
#: has the whole rule): ``lamport + 1`` never leaves what a signed 64-bit SQL integer holds.
LAMPORT_LIMIT = LAMPORT_MAX + 1


class SdsChannel:
    """One participant's view of one SDS channel."""

    def __init__(
        self,
        channel_id: str,
        participant_id: str,
        signing_key: Ed25519PrivateKey | None,
        config: SdsConfig | None = None,
        rng: random.Random | None = None,
        now: float = 0.0,
        verify_signatures: bool = True,
        bounded: bool = False,
        profile: SdsProfile | None = None,
    ) -> None:
        """``bounded``: only the newest ``config.delivered_window`` delivered ids stay in
        memory; a received message that must know about an older one is held (nothing done)
        and ``receive`` returns the request (``ReadDelivered``) for its driver to read the
        store and feed back (``delivered_read``, docs/sds.md). ``profile``: the wire rules
        (ids, signatures, filter shape and hashing, ``sync.sds.profile``), by default
        ``profile_of(config)``; the simulator passes one that shares decoding among its
        members."""
        if signing_key is not None and peer_id_of(signing_key) != participant_id:
            raise LocalProtocolError("participant_id is not the peer id of signing_key")
        cfg = config or SdsConfig()
        if profile is None:
            profile = profile_of(cfg)
        elif profile.name != cfg.profile:
            raise LocalProtocolError("the profile is not the one config names")
        self._setup = ChannelSetup(channel_id, participant_id, cfg, profile)
        # The steps read these for every message: attributes of their own, not the setup's.
        self._channel_id, self._participant_id = channel_id, participant_id
        self._config, self._profile = cfg, profile
        self._verify = verify_signatures
        self._check_ids = cfg.check_message_ids
        self._key = signing_key
        self._rng = rng or random.Random(0)
        self._bloom = RollingBloomFilter(profile.bloom_params, profile.bloom_window,
                                         profile.indices)
        # What our transmissions carry: the unnamed ids, sized (a profile whose filter has
        # fixed parameters, waku's, always sends the full one).
        self._ack_filter = AckFilter(
            # A margin below the bound: a filter near its class capacity reads ~at its design
            # rate, and in a pair the one other member's filter must meet the bound alone.
            self._bloom, min(cfg.bloom_fp_rate, max(cfg.ack_fp_bound / 16, 1e-9)),
            cfg.bloom_small_max if profile.announces_bloom_params else 0,
            cfg.bloom_small_max_request_sync if profile.announces_bloom_params else 0)
        self._stats = ChannelStats()
        self._timers = TimerQueue()
        self._events: list[SdsEvent] = []
        #: The delivered ids: the newest in memory (``sync.sds.delivered``).
        # A floor per sender where the id binds sender and Lamport time (checked, not waku).
        self._log = DeliveredIndex(cfg.delivered_window, bounded,
                                   per_sender=cfg.check_message_ids and not profile.is_waku)
        #: Heads (the frontier of the causal DAG, bounded), the log's tail and hints.
        self._history = CausalHistory(max(64, 4 * cfg.sync_history_size), cfg.max_heads,
                                      cfg.head_ttl, cfg.delivered_window)
        self._history.touch(now)
        #: SDS-R buffers, the cache of messages we may have to rebroadcast, the members.
        self._repair = RepairBuffers(participant_id, cfg, self._timers, profile.repair_hash)
        #: Delivery, waiting messages, missing and lost ids (bounded, docs/security.md "SDS
        #: buffers"), the Lamport clock.
        self._incoming = Incoming(cfg, self._log, self._history, self._repair, self._timers,
                                  self._events, int(now * 1000))
        #: Our unacknowledged messages and their resends.
        self._outgoing = OutgoingBuffer(cfg, self._timers)
        self._unacked = self._outgoing.entries  # (read for every received message)
        self._schedule = SyncSchedule(cfg, self._timers, self._repair, self._rng, now)
        signatures = VerifiedSignatures()
        self._verified = signatures.by_id  # (read for every received message)
        self._layers = ChannelLayers(cfg, self._timers, self._log, self._history, self._bloom,
                                     self._incoming, self._outgoing, self._repair,
                                     self._schedule, signatures, self._stats)
        # Other participants heard from, up to ack_min_filters of them (see sync.sds.acks).
        self._others_seen: set[str] = set()
        self._members = self._repair.members
        self._ephemeral_seen: OrderedDict[str, None] = OrderedDict()
        # The received message that asked for delivered ids: run by ``delivered_read``.
        self._asking: Callable[[], ReadDelivered | None] | None = None
        self._stale = 0  # stale answers in a row to its question
        # (At most 29 attributes: with more, CPython 3.11 gives the instance a dict of its own
        # keys instead of the class's shared ones, and every attribute read of the steps is
        # slower: ~1% of a reception. tests/sync/sds/test_surface.py checks.)
        self._schedule.arm(now)

    # ------------------------------------------------------------------ reading
    @property
    def setup(self) -> ChannelSetup:
        """Which channel, whose view, the configuration and its wire profile."""
        return self._setup

    @property
    def layers(self) -> ChannelLayers:
        """The objects that hold the state (``sync.sds.layers``): what a driver reads (the
        log, heads, buffers, clock, stats) and the few layer calls it makes (answers to its
        reads, hints, the member estimate, trusted signatures: docs/sds.md)."""
        return self._layers

    def events(self) -> list[SdsEvent]:
        out = self._events[:]
        self._events.clear()  # (the layers append to this very list)
        return out

    def get_timer(self) -> float | None:
        return self._timers.next_deadline()

    def forget(self, message_id: str) -> bool:
        """Undo the delivery of a message its node could not store, so that it is neither
        named in our histories, served as a repair, resent nor counted as logged; a later copy
        is delivered afresh. (Its bit in the rolling bloom filter stays until it rolls out: a
        filter cannot remove an element.)"""
        if not self._log.discard(message_id):
            return False
        self._history.forget(message_id)
        self._repair.forget(message_id)
        self._outgoing.discard(message_id)
        return True

    # ------------------------------------------------------------------ sending
    def _tick(self, now: float) -> int:
        lamport = max(int(now * 1000), self._incoming.lamport + 1)
        if lamport > LAMPORT_MAX:
            raise LocalProtocolError("lamport clock exhausted")
        self._incoming.lamport = lamport
        return lamport

    def send(self, content: bytes, now: float, *, retrieval_hint: bytes | None = None,
             ephemeral: bool = False) -> bytes:
        """Create, log and return a content message to broadcast. ``ephemeral``: a message
        with no lamport, history or filter, neither logged nor resent."""
        if ephemeral:
            if not content:
                raise LocalProtocolError("ephemeral content must not be empty")
            if retrieval_hint is not None:  # (it would name the id in histories: none does)
                raise LocalProtocolError("an ephemeral message takes no retrieval hint")
            return self._profile.encode(self._channel_id, self._participant_id, None, (),
                                        content, self._key, self._rng).wire
        if not content:
            raise LocalProtocolError("content must not be empty (empty content is a sync)")
        if self._profile.is_waku and self._log.contains(waku_message_id(content)):
            # The id is the payload's hash: a second send would be the same message.
            raise LocalProtocolError("this payload was sent already (waku ids are its hash)")
        lamport = self._tick(now)
        history = self._history.choose(self._config.causal_history_size, now, rng=self._rng)
        event = self._profile.encode(
            self._channel_id, self._participant_id, lamport, history, content, self._key, self._rng
        )
        mid = event.message_id
        if retrieval_hint is not None:
            self._history.set_hint(mid, retrieval_hint)
        self._ack_filter.named((h.message_id for h in history), self._participant_id)
        self._bloom.add(mid)
        self._incoming.deliver(event, lost_dependency=False)
        self._outgoing.add(mid, event.wire, now, self._events, history=event.history_ids)
        self._schedule.last_activity = now
        return event.wire + self._suffix(now, mid)

    def _sync_message(self, now: float, *, periodic: bool = True) -> bytes:
        """A sync message: a periodic one names up to ``sync_history_size`` heads (a seeded
        sample); one sent only because repair requests fell due names what a content message
        would (its job is the requests; at scale these are most syncs, docs/sds.md)."""
        lamport = self._tick(now)
        if periodic:
            history = self._history.choose(self._config.sync_history_size, now, rotate=True)
        else:
            history = self._history.choose(self._config.causal_history_size, now)
        event = self._profile.encode(self._channel_id, self._participant_id, lamport, history, b"",
                                    self._key, self._rng)
        self._ack_filter.named((h.message_id for h in history), self._participant_id)
        self._schedule.last_activity = now
        return event.wire + self._suffix(now, event.message_id, request_sync=not periodic)

    def _suffix(self, now: float, mid: str, *, requests: bool = True,
                request_sync: bool = False) -> bytes:
        """Filter and due repair requests for a transmission of ``mid``; no requests on a
        rebroadcast of someone else's message (they are signed by, and charged to, the
        message's sender: ours would be ignored)."""
        bloom, params = self._ack_filter.encoded(request_sync=request_sync)
        return transmission_suffix(
            bloom, params,
            self._take_repair_requests(now) if requests else (),
            announce_params=self._profile.announces_bloom_params, channel_id=self._channel_id,
            # A waku channel's wire has no signatures (sync.sds.profile).
            signing_key=self._key if self._profile.signed else None, message_id=mid,
        )

    def _take_repair_requests(self, now: float) -> tuple[HistoryRef, ...]:
        chosen = self._repair.take_due(now)
        if chosen:
            self._events.append(RepairRequested(tuple(r.message_id for r in chosen)))
        return chosen

    # ------------------------------------------------------------------ receiving
    def receive(self, data: bytes, now: float, peer: str | None = None) -> ReadDelivered | None:
        """Process a received message; ``RemoteProtocolError`` (and no state change) if bad.
        A ``ReadDelivered`` when only the store can say whether ids it names were delivered:
        the message is decoded and checked, and its step waits for :meth:`delivered_read`
        (the question is its first act: nothing was done yet)."""
        return self._held_if_asking(self._decoded(data, now, peer))

    def delivered_read(self, answer: DeliveredRead | None) -> ReadDelivered | None:
        """The store's answer to the request ``receive`` returned: the message it holds runs
        with it, and may ask again (then as ``receive`` does). An answer made stale by a whole
        window of deliveries while the store was read is not used: the request comes back,
        asked from now (the ``STALE_ANSWERS``-th stale answer in a row is used anyway).
        ``None``: the driver gives the message up (a resend, a repair or Recon brings it
        again)."""
        step = self._asking
        if answer is None:
            self._asking, self._stale = None, 0
            return None
        if step is None:
            raise LocalProtocolError("no received message waits for delivered ids")
        read = answer.read
        self._stale += 1
        if not self._log.answer(read, answer.found, force=self._stale >= STALE_ANSWERS):
            return read.again(self._log.added)
        self._asking, self._stale = None, 0
        return self._held_if_asking(step)

    def _held_if_asking(self, step: Callable[[], ReadDelivered | None]) -> ReadDelivered | None:
        if (read := step()) is not None:  # its first act, the question: nothing changed yet
            self._asking = step
        return read

    def _decoded(self, data: bytes, now: float, peer: str | None
                 ) -> Callable[[], ReadDelivered | None]:
        """Decode and check a received message; its protocol step, to run (``_accept``)."""
        try:
            tx = self._profile.decode(
                data,
                check_id=self._check_ids,
                verify_signature=self._verify,
                known_signatures=self._verified,
            )
            self._check_event(tx.event, now)
            evidence = None
            view = self._profile.view(tx, 8 * self._config.max_message_size)
            if view is not None and tx.bloom_filter is not None:
                # A waku channel's filters are never signed: taken as their sender's evidence
                # (docs/interop.md, "Acknowledgements on a waku channel").
                evidence = FilterEvidence(view, tx.bloom_filter, tx.bloom_signature,
                                          trusted=not self._verify
                                          or not self._profile.signed)
        except RemoteProtocolError as exc:
            raise exc.from_peer(peer) from None
        event = tx.event
        if event.signature is not None and self._verify:
            self._layers.signatures.remember(event.message_id, event.signature)
        return partial(self._accept, event, evidence, tx.repair_request, now,
                       tx.repair_signature)

    def receive_event(self, event: SignedEvent, now: float, peer: str | None = None
                      ) -> ReadDelivered | None:
        """Process an event its caller already decoded and checked (id and signature, say with
        ``decode_event`` in a worker thread): a fetched or stored event, which carries no
        per-transmission fields. Saves decoding the wire a second time. Its caller asks its
        questions up front (``sync.replication.ingest_reads``): should one be left, the event
        is not taken and the request is returned (nothing is held)."""
        try:
            self._check_event(event, now)
        except RemoteProtocolError as exc:
            raise exc.from_peer(peer) from None
        if (read := self._accept(event, None, (), now)) is not None:
            return read
        if event.message_id in self._incoming.waiting:
            self._stats.fetched_waiting += 1
        return None

    def deliver_settled(self, mids: Sequence[str], senders: Sequence[str],
                        lamports: Sequence[int], histories: Sequence[Sequence[str]],
                        now: float) -> tuple[list[int], list[int]]:
        """Bulk delivery of verified *old* content events (a Recon catch-up), in the order
        given (ascending Lamport time): an event older than the live window (the longest an
        SDS exchange about it can go on: ``lost_timeout``, resends) whose dependencies are all
        delivered is logged with only what SDS needs of it later (its id, for duplicates and
        histories, and the clock); no bloom insertion (no peer awaits its acknowledgement),
        no heads, tail, repair cache or causal tracking. Returns (positions delivered,
        positions that need the full step, ``receive_event``: recent, own, awaited, missing,
        naming our unacknowledged messages or an undelivered dependency); the rest were
        duplicates. The caller has checked the clock rule and the channel."""
        cfg = self._config
        # Resends wait up to 3 intervals while acknowledgements are slow (sync.sds.outgoing).
        horizon = int(now * 1000) - int(1000 * max(
            cfg.lost_timeout, 3 * cfg.resend_interval * (cfg.max_resends + 1)))
        incoming = self._incoming
        log, waiting, missing, waiters, lost = (self._log, incoming.waiting, incoming.missing,
                                                incoming.waiters, incoming.lost)
        own, outgoing = self._participant_id, self._outgoing.entries
        memory = log.memory
        # Those in memory now are delivered: the batch's own deliveries may evict them before
        # their turn (a copy fetched again), and they must not look new then.
        stored: set[str] = {m for m in mids if m in memory} if log.bounded else set()
        if not log.complete:
            # One store question for the dependencies memory cannot answer (in a catch-up in
            # Recon's key order they are mostly the same sender's previous events, in memory)
            # and for events older than their sender's floor in memory (held ones are
            # duplicates).
            batch, floor_for = set(mids), log.floor_for
            stored |= log.known({h for hist in histories for h in hist
                                if h not in memory and h not in batch}
                               | {m for m, lam, s in zip(mids, lamports, senders, strict=True)
                                  if lam <= floor_for(s) and m not in memory})
        delivered: list[int] = []
        full: list[int] = []
        for i, mid in enumerate(mids):
            lamport, sender, hist = lamports[i], senders[i], histories[i]
            if mid in memory or mid in stored:
                continue
            if (lamport >= horizon or sender == own or mid in waiting or mid in missing
                    or mid in waiters or mid in lost
                    or (outgoing and any(h in outgoing for h in hist))
                    or not all(h in memory or h in stored for h in hist)):
                full.append(i)
                continue
            log.add(mid, lamport, sender)
            if lamport > incoming.lamport:
                incoming.lamport = lamport
            if len(self._others_seen) < cfg.ack_min_filters:
                self._others_seen.add(sender)
            self._repair.seen(mid)
            delivered.append(i)
        return delivered, full

    def _check_event(self, event: SignedEvent, now: float) -> None:
        if event.channel_id != self._channel_id:
            raise RemoteProtocolError("message for another channel", kind=ErrorKind.REFUSED)
        if event.lamport is not None:
            check_lamport(event.lamport, now, self._config.max_lamport_ahead_ms)

    def _accept(self, event: SignedEvent, evidence: FilterEvidence | None,
                repair_request: tuple[HistoryRef, ...], now: float,
                repair_signature: bytes | None = None) -> ReadDelivered | None:
        """The protocol steps for a valid message: nothing here raises on peer input. First
        what only the store knows: the question (``ReadDelivered``) is returned before
        anything changes, and the step is taken once it is answered."""
        # While memory holds the whole log the store has nothing to add: no question, and no
        # call (issue 30: the receive path's per-step overhead).
        log = self._log
        stored: Set[str] = _NOTHING_STORED
        if not log.complete:
            got = self._stored_of(event)
            if isinstance(got, ReadDelivered):
                return got
            stored = got
        mid = event.message_id
        sender = event.sender_id
        repair = self._repair
        if repair.requests or repair.responses:  # (nothing to forget otherwise: no call)
            repair.seen(mid)
        if sender == self._participant_id:
            return None
        self._members.heard(sender, now)
        self._history.touch(now)
        # (``is_ephemeral`` and ``is_sync`` spelled out: this runs for every message.)
        if event.lamport is None:
            self._receive_ephemeral(event)
            return None
        others = self._others_seen
        if len(others) < self._config.ack_min_filters:
            others.add(sender)
        # The named ids, built once for the ack filter, the heads and the Delivered event.
        hist = event.causal_history
        history_ids = tuple([h.message_id for h in hist]) if hist else ()
        if hist:
            self._ack_filter.named(history_ids, sender)
        if self._unacked:
            needed = min(self._config.ack_min_filters, len(others))
            self._outgoing.review(event, evidence, self._channel_id, needed,
                                 self._profile.indices, self._events, now)
        if repair_request:
            self._on_repair_requests(event, repair_request, repair_signature, now)
        incoming = self._incoming
        if not event.content:  # a sync
            self._schedule.last_activity = now
            self._history.named_by_others(history_ids)
            unknown = [h for h in event.causal_history
                       if incoming.is_unknown(h.message_id) and h.message_id not in stored]
            incoming.note_missing(unknown, now, charged_to=event.sender_id)
            return None
        memory = log.memory
        if mid in incoming.waiting or mid in memory:
            # A duplicate (a resend or repair) does not hold back our sync: its sender may be
            # waiting for exactly the acknowledgement our sync carries. (Not a sync, so its
            # sender has no acknowledgement yet: say we have it.)
            self._stats.duplicates_received += 1
            self._ack_filter.received(mid, sender, again=True)
            return None
        lost_ids = incoming.lost
        if mid in stored:
            self._stats.duplicates_received += 1
            return None
        self._schedule.last_activity = now
        self._ack_filter.received(mid, sender)
        unmet: list[HistoryRef] = []
        lost = False
        for h in hist:
            if h.retrieval_hint is not None:
                incoming.learn_hint(h)
            if h.message_id in memory or h.message_id in stored:
                continue
            if h.message_id in lost_ids:
                lost = True
            else:
                unmet.append(h)
        if not unmet:
            incoming.deliver(event, lost_dependency=lost, history_ids=history_ids)
            return None
        if not incoming.wait(event, {h.message_id for h in unmet}, lost):
            return None
        incoming.received(mid)
        incoming.note_missing([h for h in unmet if h.message_id not in incoming.waiting], now,
                              charged_to=event.sender_id)
        return None

    def _stored_of(self, event: SignedEvent) -> set[str] | ReadDelivered:
        """Those ids ``_accept`` of ``event`` must know about that memory cannot answer and
        the log holds: one question (``ReadDelivered``) for a sync's unknown history
        entries; for content, the event itself when it is older than the window and history
        entries not in memory. Ids already known missing were not delivered when noted, and
        only a delivery (into memory) changes that: no question for them (a catch-up in
        Recon's key order names many). Asked before the step changes anything."""
        log, incoming = self._log, self._incoming
        if log.complete or event.sender_id == self._participant_id or event.is_ephemeral:
            return set()
        if event.is_sync:
            return log.settle(h.message_id for h in event.causal_history
                              if incoming.is_unknown(h.message_id))
        mid = event.message_id
        if mid in incoming.waiting or log.in_memory(mid):
            return set()  # a duplicate memory knows
        lost, missing, waiters = incoming.lost, incoming.missing, incoming.waiters
        ask = [h.message_id for h in event.causal_history
               if not log.in_memory(h.message_id) and h.message_id not in lost
               and h.message_id not in missing and h.message_id not in waiters]
        assert event.lamport is not None
        if event.lamport <= log.floor_for(event.sender_id):
            ask.append(mid)
        return log.settle(ask) if ask else set()

    def _on_repair_requests(self, event: SignedEvent, refs: tuple[HistoryRef, ...],
                            signature: bytes | None, now: float) -> None:
        """Only requests their sender signed on this message count (docs/sds.md "SDS-R"):
        a relay cannot make us answer in someone else's name, and each request is charged to
        whoever signed it. Requests ride on fresh messages only (new content and syncs, never
        resends), so on a message older than ``t_min`` they are a replay: ignored."""
        if self._profile.signed and (event.lamport is None
                                    or event.lamport < (now - self._config.t_min) * 1000):
            # (A waku channel's Lamport clock need not be epoch milliseconds: no such rule.)
            self._stats.repair_stale_ignored += 1
            return
        if (self._verify and self._profile.signed
                and not verify_repair(event.sender_id, self._channel_id, event.message_id, refs,
                                      signature)):
            self._stats.repair_unsigned_ignored += 1
            return
        self._repair.response_groups(now)
        refused = self._repair.on_requests(refs, now, event.sender_id)
        if refused:
            self._events.append(RepairRefused(event.sender_id, tuple(refused)))

    def _receive_ephemeral(self, event: SignedEvent) -> None:
        seen = self._ephemeral_seen
        if event.message_id in seen:
            return
        seen[event.message_id] = None
        if len(seen) > self._config.ephemeral_dedup_size:
            seen.popitem(last=False)
        self._events.append(EphemeralReceived(event.message_id, event.sender_id, event.content))

    # ------------------------------------------------------------------ timers
    def handle_timer(self, now: float) -> list[bytes]:
        """Run every timer due at ``now``; returns the messages to broadcast that they made
        (resends, syncs, repair answers), as ``send`` returns its message."""
        self._history.touch(now)
        schedule = self._schedule
        sent: list[bytes] = []
        while True:
            due = self._timers.pop_due(now)
            if not due:
                return sent
            want_sync = periodic = False
            for kind, key in due:
                if kind is TimerKind.LOST:
                    self._incoming.declare_lost(key)
                elif kind is TimerKind.RESEND:
                    if (wire := self._resend(key, now)) is not None:
                        sent.append(wire)
                elif kind is TimerKind.REPAIR_RESPONSE:
                    if (wire := self._answer_repair(key, now)) is not None:
                        sent.append(wire)
                elif kind is TimerKind.REPAIR_REQUEST:
                    if key in self._repair.requests:
                        want_sync = want_sync or schedule.linger(now)
                elif kind is TimerKind.SYNC and key == REPAIR_SYNC_KEY:
                    want_sync = want_sync or self._repair.has_due(now)
                elif kind is TimerKind.SYNC:
                    periodic = periodic or schedule.periodic_due(now, has_log=bool(self._log))
            if want_sync or periodic:
                sent.append(self._send_sync(now, periodic=periodic))

    def _send_sync(self, now: float, *, periodic: bool = True) -> bytes:
        wire = self._sync_message(now, periodic=periodic)
        self._repair.pace_due(now)
        self._schedule.arm(now)
        return wire

    def _resend(self, mid: str, now: float) -> bytes | None:
        wire = self._outgoing.due(mid, now, self._events)
        if wire is None:
            return None
        self._stats.resends += 1
        # No repair requests on a resend: they would ride on an old message, which receivers
        # take for a replay (``_on_repair_requests``); our next sync carries them.
        suffix = self._suffix(now, mid, requests=False)
        self._outgoing.spent(len(suffix))
        self._schedule.last_activity = now
        return wire + suffix

    def _answer_repair(self, mid: str, now: float) -> bytes | None:
        wire = self._repair.respond(mid, now)
        if wire is None:
            return None
        # A signed channel's answer goes without our filter: its signature would be checked
        # against the message's sender, not us, so it could only cost bytes (most of them).
        answer = wire if self._profile.signed else wire + self._suffix(now, mid, requests=False)
        self._schedule.last_activity = now
        self._events.append(RepairAnswered(mid))
        return answer

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> ChannelState:
        """What is persisted (``encode_state``): the clock, the buffers, the repair buffers,
        the heads and when each timer is due (``sync.sds.persist``)."""
        return snapshot_of(self._layers, self._channel_id, self._participant_id)

    @classmethod
    def restore(
        cls,
        state: bytes | ChannelState,
        signing_key: Ed25519PrivateKey | None,
        *,
        log: Iterable[LogEntry] = (),
        cached_wires: Iterable[bytes] = (),
        outgoing_wires: Mapping[str, bytes] | None = None,
        config: SdsConfig | None = None,
        rng: random.Random | None = None,
        now: float = 0.0,
        verify_signatures: bool = True,
        bounded: bool = False,
        log_truncated: bool = False,
        delivered: tuple[ReadDelivered, Collection[str]] | None = None,
        profile: SdsProfile | None = None,
        resend_restored: bool = True,
    ) -> SdsChannel:
        """Rebuild a channel from a ``snapshot()`` (or its ``encode_state`` bytes) and the
        persisted log.

        ``log``: delivered (message_id, lamport) or (message_id, lamport, sender_id): the whole
        log, or when ``bounded`` and ``log_truncated`` its newest part (at least
        ``delivered_window`` entries, the store answers for the rest: ``delivered`` is the
        answer to ``state_reads(state, ...)``, asked before); the bloom filter is
        rebuilt from its most recent entries. ``cached_wires``: canonical wires of recent
        messages, to serve repairs. ``outgoing_wires``: id -> canonical wire of our own
        unacknowledged messages, which the state names by id only; any missing here is
        looked for in ``cached_wires``. ``resend_restored`` off: those whose resend is still
        ahead are left, like the overdue ones, to the reconciliation a restart starts
        (``sync.sds.persist.load_state``). A malformed state raises ``RemoteProtocolError``.
        """
        snap = decode_state(state) if isinstance(state, bytes) else state
        ch = cls(snap.channel_id, snap.participant_id, signing_key, config=config, rng=rng,
                 now=now, verify_signatures=verify_signatures, bounded=bounded, profile=profile)
        try:
            load_log(ch._layers, log, truncated=log_truncated)
            if delivered is not None:
                ch._log.answer(*delivered, force=True)
            wanted = {o.message_id for o in snap.outgoing if o.wire is None}
            wires = dict(outgoing_wires or {})
            cached: list[tuple[str, str, bytes]] = []
            for wire in cached_wires:
                event = decode_event(wire, max_size=ch._config.max_message_size,
                                     verify_signature=False)
                # (id, sender, wire) only: the decoded content would be a second copy.
                cached.append((event.message_id, event.sender_id, event.wire))
                if event.message_id in wanted:
                    wires.setdefault(event.message_id, event.wire)
                del event
            load_state(ch._layers, snap, now, wires, resend_restored=resend_restored)
            for mid, sender, wire in cached:
                if ch._log.in_memory(mid):
                    ch._repair.remember(mid, sender, wire)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise RemoteProtocolError(f"bad channel state: {exc}") from None
        return ch
