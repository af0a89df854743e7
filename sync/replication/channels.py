"""``ChannelSet``: a node's SDS channels as one part of its replication core, sans-IO.

Every input of a channel comes in here with ``now`` (wall seconds: SDS's timestamps are wall
time) and what to do comes out as actions (``sync.actions``): gossip (``gossip`` admits a
message on its neighbour's budget, ``receive`` steps one item), the answers to the channel's
questions about its log (``delivered_read``), its timers (``get_timer`` / ``handle_timer``),
what we publish (``publish``) and fetched events (``ingest``: ``sync.replication.ingest``).

What a channel reports is turned into actions here, never in a driver: deliveries become
``StoreDelivered`` (the records to store), a repair requester over its budget a ``Penalize``,
missing dependencies a ``GapFound`` (``ReplicationCore`` queues their fetch), the messages its
timers make ``Broadcast``; the rest is a ``ChannelNote`` to count.

A received message whose step must know about an older delivered id is held by its channel,
which asks ``ReadLog``; the driver reads its store and answers ``delivered_read``. An answer
can come back stale (other steps changed the log while the store was read) and the step asks
again: after ``MAX_READS`` reads it is given up (``StepDropped``). Reads asked up front (a waku
publish's, an ingest batch's: ``publish_reads``, ``ingest_reads``) are answered with
``answer_log`` before the step runs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from sync.actions import (
    Action,
    Broadcast,
    ChannelNote,
    GapFound,
    Penalize,
    ReadLog,
    Rejected,
    StepDropped,
    StoreDelivered,
    StoreFetched,
    UnsignedAccepted,
)
from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.gossip import GossipGate, GossipLimits, SenderPolicy
from sync.ingest import IngestSpec, VerifiedBatch
from sync.peerscore import penalty_of
from sync.recon.eventid import CIP124_DRAFT
from sync.replication.ingest import ingest_batch, sds_penalty
from sync.replication.ingest import ingest_reads as batch_reads
from sync.sds import (
    Delivered,
    DeliveredRead,
    MissingDependencies,
    ReadDelivered,
    SdsChannel,
    SdsConfig,
)
from sync.sds.delivered import STALE_ANSWERS
from sync.sds.state import ChannelState
from sync.sds.waku import send_reads
from sync.stored_event import EventRecord, record_of_delivered

__all__ = ["MAX_READS", "ChannelSet", "Published"]

#: Reads for one received message before it is given up: up to 8 questions (a second one
#: means other steps changed the channel while the store was read), each asked up to
#: ``sync.sds.STALE_ANSWERS`` times.
MAX_READS = 8 * STALE_ANSWERS


@dataclass
class Published:
    """What ``ChannelSet.publish`` sent: ``wires`` to broadcast once ``own`` (their deliveries,
    in order) is stored, the channel's other ``actions``, and the error that ended the batch
    early (None: all were sent)."""

    wires: list[bytes]
    own: list[Delivered]
    actions: list[Action]
    error: Exception | None = None


@dataclass(frozen=True)
class _Held:
    """A received message's step: whose it is, whether a refusal charges them, the read it
    waits for and how many it has asked."""

    peer: str | None
    penalise: bool
    read: ReadDelivered | None = None
    reads: int = 0


@dataclass
class ChannelSet:
    """The SDS channels of one node (name -> channel, restored by the driver), the rules of
    what enters them (``policy``, ``gate``) and how their deliveries are stored."""

    channels: dict[str, SdsChannel]
    policy: SenderPolicy
    gate: GossipGate
    network_id: int
    event_id_layout: str
    max_lamport_ahead_ms: int
    #: channel -> the step it holds, waiting for a read.
    _held: dict[str, _Held] = field(default_factory=dict, init=False)

    @classmethod
    def of(cls, channels: Mapping[str, SdsChannel], own_id: str, network_id: int, *,
           config: SdsConfig | None = None, event_id_layout: str = CIP124_DRAFT,
           members: frozenset[str] | None = None,
           writers: Mapping[str, frozenset[str]] | None = None,
           gossip_limits: GossipLimits | None = None) -> ChannelSet:
        """``channels`` on SDS settings ``config``: a closed group (``members``) accepts only
        its members' events, whoever relays them (we are one of them); ``writers``: channel ->
        who may publish content on it; gossip items are bounded by SDS's message size."""
        cfg = config or SdsConfig()
        policy = SenderPolicy(own_id, members | {own_id} if members else None,
                              dict(writers or {}))
        limits = gossip_limits or GossipLimits()
        gate = GossipGate(policy, GossipLimits(
            peer_rate=limits.peer_rate, peer_burst=limits.peer_burst, max_peers=limits.max_peers,
            max_item_bytes=cfg.max_message_size))
        return cls(dict(channels), policy, gate, network_id, event_id_layout,
                   cfg.max_lamport_ahead_ms)

    def __getitem__(self, name: str) -> SdsChannel:
        return self.channels[name]

    @property
    def spec(self) -> IngestSpec:
        """What verifying an event fetched for these channels needs to know."""
        return IngestSpec(self.network_id, self.event_id_layout,
                          {name: ch.setup.profile.name for name, ch in self.channels.items()},
                          self.gate.limits.max_item_bytes)

    # -- gossip -------------------------------------------------------------------------------

    def gossip(self, data: bytes, neighbour: str, publisher: str, arrived: float,
               *, direct: bool) -> tuple[list[Action], list[bytes]]:
        """A gossip message ``neighbour`` handed us (``publisher``: who it says made it;
        ``direct``: the same peer, which then answers for it) at ``arrived``: (what its
        refused parts cost, the items to ``receive`` in turn). The budget is the neighbour's:
        that one is authenticated by the connection, the publisher field is not."""
        admitted = self.gate.admit(data, neighbour, arrived, publisher=publisher)
        actions: list[Action] = []
        for exc, penalty in admitted.rejected:
            actions.append(Rejected(publisher, exc.kind, exc.reason))
            if direct and penalty is not None:
                actions.append(Penalize(publisher, penalty))
        return actions, admitted.items

    def receive(self, name: str, data: bytes, now: float, peer: str | None, *,
                penalise: bool = True) -> list[Action]:
        """One gossip item for channel ``name``; may end with ``ReadLog`` (the step waits for
        its answer). A refused item is counted and, if ``penalise``, charged to ``peer``. What
        the channel reported is left for :meth:`drain` (one for a message's items)."""
        ch = self.channels[name]
        try:
            read = ch.receive(data, now, peer)
        except RemoteProtocolError as exc:
            return self._refused(exc, peer, penalise)
        if read is None:  # the common case: nothing to ask, nothing made here
            return [UnsignedAccepted(name, 1)] if ch.setup.profile.is_waku else []
        return self._asked(name, read, _Held(peer, penalise))

    def delivered_read(self, name: str, found: Collection[str]) -> list[Action]:
        """The answer to channel ``name``'s ``ReadLog``: its held step goes on."""
        held = self._held.pop(name, None)
        if held is None or held.read is None:
            raise LocalProtocolError(f"channel {name} holds no step waiting for a read")
        ch = self.channels[name]
        try:
            read = ch.delivered_read(DeliveredRead(held.read, frozenset(found)))
        except RemoteProtocolError as exc:
            return self._refused(exc, held.peer, held.penalise)
        if read is None:
            return [UnsignedAccepted(name, 1)] if ch.setup.profile.is_waku else []
        return self._asked(name, read, held)

    def _asked(self, name: str, read: ReadDelivered, held: _Held) -> list[Action]:
        """The step asks ``read``: held for its answer, or given up past ``MAX_READS``."""
        if held.reads >= MAX_READS:
            self.channels[name].delivered_read(None)
            return [StepDropped(name)]
        self._held[name] = _Held(held.peer, held.penalise, read, held.reads + 1)
        return [ReadLog(name, read)]

    def _refused(self, exc: RemoteProtocolError, peer: str | None,
                 penalise: bool) -> list[Action]:
        actions: list[Action] = [Rejected(peer, exc.kind, exc.reason)]
        if penalise and peer is not None:
            actions.append(Penalize(peer, penalty_of(exc.kind)))
        return actions

    # -- timers --------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The earliest channel timer (wall seconds; None: none set)."""
        due = [t for ch in self.channels.values() if (t := ch.get_timer()) is not None]
        return min(due, default=None)

    def handle_timer(self, now: float) -> list[Action]:
        """Every channel's timers due at ``now``: the messages they made, what they delivered."""
        actions: list[Action] = []
        for name, ch in self.channels.items():
            due = ch.get_timer()
            if due is not None and due <= now:
                actions += [Broadcast(name, d) for d in ch.handle_timer(now)]
                actions += self.drain(name)
        return actions

    # -- what we publish -----------------------------------------------------------------------

    def publish_reads(self, name: str, contents: Sequence[bytes]) -> ReadDelivered | None:
        """What publishing ``contents`` on ``name`` must know of its log first (a waku channel
        refuses a payload it sent already); answer with :meth:`answer_log`."""
        ch = self.channels[name]
        return send_reads(ch.layers.log, contents) if ch.setup.profile.is_waku else None

    def publish(self, name: str, contents: Sequence[bytes], now: float) -> Published:
        """Send ``contents`` in order; a content SDS refuses ends the batch (the ones before it
        are sent). Raises that error when it is the first."""
        ch = self.channels[name]
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
        actions = self.drain(name)
        delivered = [d for a in actions if isinstance(a, StoreDelivered) for d in a.delivered]
        # send() delivers our own messages at once: the last len(wires) of ours in this drain.
        own = [d for d in delivered if d.sender_id == self.policy.own_id][-len(wires):]
        return Published(wires, own, actions, error)

    # -- fetched events ------------------------------------------------------------------------

    def ingest_reads(self, batch: VerifiedBatch, positions: Sequence[int]
                     ) -> dict[str, ReadDelivered]:
        """channel -> what ``ingest`` of ``positions`` may ask of that channel's log; answer
        each with :meth:`answer_log` first."""
        return batch_reads(batch, positions, self.channels)

    def answer_log(self, name: str, read: ReadDelivered, found: Collection[str], *,
                   last: bool = False) -> bool:
        """The answer to an up-front read; False: it came back stale (a whole window of
        deliveries came in while the store was read): ask anew (``last``: take it anyway)."""
        return self.channels[name].layers.log.answer(read, found, force=last)

    def ingest(self, batch: VerifiedBatch, wires: Sequence[bytes], positions: Sequence[int],
               peer: str | None, now: float) -> tuple[list[Action], int]:
        """Verified fetched events at ``positions`` (causal order), their reads answered:
        (what to do, how many were refused). Refusals are counted here and charged to ``peer``
        by the ``Penalize`` that follows each (``sync.replication.ingest``)."""
        out = ingest_batch(batch, wires, positions, peer, self.channels, self.policy, now,
                           self.max_lamport_ahead_ms)
        actions = list(out.actions)
        if out.records or out.bulk:
            actions.append(StoreFetched(tuple(out.records), tuple(sorted(out.bulk.items()))))
        actions += [UnsignedAccepted(name, count) for name, count in out.stepped.items()
                    if self.channels[name].setup.profile.is_waku]
        for name in sorted(out.touched):
            actions += self.drain(name, prompt=True)
        return actions, out.refused

    # -- what the node asks --------------------------------------------------------------------

    def drain(self, name: str, *, prompt: bool = False) -> list[Action]:
        """What channel ``name`` reported since its last drain, as actions; always ends with
        its ``StoreDelivered`` (the channel's state changed)."""
        records: list[EventRecord] = []
        delivered: list[Delivered] = []
        actions: list[Action] = []
        for ev in self.channels[name].events():
            if isinstance(ev, Delivered):
                delivered.append(ev)
                records.append(record_of_delivered(self.network_id, name, ev,
                                                   self.event_id_layout))
            elif (penalty := sds_penalty(ev)) is not None:
                actions += [ChannelNote(name, ev), penalty]
            elif isinstance(ev, MissingDependencies):
                actions.append(GapFound(name, tuple(ev.entries)))
            else:
                actions.append(ChannelNote(name, ev))
        actions.append(StoreDelivered(name, tuple(records), tuple(delivered), prompt))
        return actions

    def undeliver(self, records: Sequence[EventRecord]) -> dict[str, int]:
        """Records no backend could store: no longer delivered, so a resend, a repair or Recon
        may bring them again; channel -> how many."""
        undone: dict[str, int] = {}
        for record in records:
            ch = self.channels.get(record.channel)
            if ch is not None and ch.forget(record.message_id):
                undone[record.channel] = undone.get(record.channel, 0) + 1
        return undone

    def is_missing(self, message_id: str) -> bool:
        """Whether any channel still lacks ``message_id`` (a known missing dependency)."""
        return any(ch.layers.incoming.is_missing(message_id) for ch in self.channels.values())

    def set_members(self, name: str, members: int) -> None:
        """The node's estimate of the group's size for channel ``name`` (SDS-R response groups
        are ``N div 128 + 1``; the channel takes the larger of this and the senders it
        heard)."""
        self.channels[name].layers.repair.members.set_external(members)

    def state(self, name: str) -> ChannelState:
        """Channel ``name``'s state, to save."""
        return self.channels[name].snapshot()
