"""The one driver of the replication core: it reads the clock, feeds the core its inputs and
carries out every action it returns.

The core is sans-IO (:class:`~sync.replication.ReplicationCore`: the SDS channels, Recon
sessions with their claims and backlog, and fetches by id). Everything the node learns that
concerns it comes in here: its timer (``rounds``) and the channels' (``channel_timers``, on the
wall clock), gaps SDS reports (``GapFound`` -> ``missing``), connections, the store's reports
of its queue and commits (``store_reports``: read from the store, never called by it), and the
answers to the core's requests (``step`` answers a channel's ``ReadLog`` from the store,
``claim`` answers ``ReadStored``, ``rounds`` answers ``FetchDue`` with what SDS still misses;
each answer goes back as the core's next input). What comes out is carried out in one place,
``carry_out``: records stored, messages queued for gossip, penalties, counters, wake-ups.

The sessions themselves (streams, the WANT/EVENTS phases), the fetch requests and the gossip
subscriptions are run by ``ReconService``, ``Fetcher`` and ``ChannelService``; each is given
this driver when it is built (no callback is set on anything after construction), and the
loop that starts sessions and fetches takes both as arguments.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import trio

from node.p2p import P2PHost
from node.p2p.standing import PeerStanding
from node.replication.channel_metrics import EVENT_COUNTERS
from node.replication.clock import Clock
from node.replication.delivered_reads import DeliveredReads
from node.replication.gossip_outbox import GossipOutbox
from node.store.events import EventStore
from node.store.reports import Committed, Failed, Queued, StoreReport
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import AppendResult, EventRecord, existing_keys
from sync.replication import (
    Action,
    Broadcast,
    ChannelNote,
    ClaimsLapsed,
    FetchDue,
    FetchPlan,
    GapFound,
    KeysWithheld,
    Penalize,
    ReadLog,
    ReadStored,
    Rejected,
    ReplicationCore,
    SessionFailed,
    SessionPlan,
    StartSession,
    StepDropped,
    StoreDelivered,
    StoreFetched,
    UnsignedAccepted,
)
from sync.sds import Evicted, MissingEntry, RepairRequested

__all__ = ["ReplicationDriver"]

log = logging.getLogger("syncnode.recon")

_COUNTERS = {
    "recon_keys_withheld_total": "Keys a peer advertised and left out of its answer",
    "recon_claims_lapsed_total": "Claimed keys released because the peer stalled",
}


_ChannelAction = (StoreDelivered | Broadcast | StoreFetched | ChannelNote | UnsignedAccepted
                  | StepDropped | ReadLog)
_CHANNEL_ACTIONS = (StoreDelivered, Broadcast, StoreFetched, ChannelNote, UnsignedAccepted,
                    StepDropped, ReadLog)


@dataclass(kw_only=True, eq=False)
class ReplicationDriver:
    core: ReplicationCore
    host: P2PHost
    store: EventStore
    metrics: Metrics
    standing: PeerStanding | None
    clock: Clock
    #: Where the channels' messages go out (``Broadcast``, and what the API publishes).
    outbox: GossipOutbox
    #: Channels whose state changed since it was last saved (``ChannelService.save_state``).
    dirty: set[str] = field(default_factory=set, init=False)
    _wake: trio.Event = field(default_factory=trio.Event, init=False)
    _channel_wake: trio.Event = field(default_factory=trio.Event, init=False)

    def __post_init__(self) -> None:
        for name, text in _COUNTERS.items():
            self.metrics.describe(name, "counter", text)
            self.metrics.inc(name, 0)
        #: Answers the channels' questions about old delivered ids between their steps.
        self.reads = DeliveredReads(self.store, self.metrics)

    # -- actions -------------------------------------------------------------------------------

    def carry_out(self, actions: Sequence[Action], *, store: bool = True,
                  wake: bool = True) -> None:
        """Do what the core decided (``StartSession`` and ``FetchDue`` are the loop's:
        ``rounds``; ``ReadLog``, ``step``'s). ``store``: submit what ``StoreDelivered`` names
        (False: the caller commits it itself, as publishing does). ``wake``: let the session
        loop look at the core's timer again (a channel's step leaves it alone: a gossip
        message would otherwise run that loop once per message; a gap it reports prompts
        sessions, which wakes it)."""
        for action in actions:
            if isinstance(action, _CHANNEL_ACTIONS):
                self._carry_out_channel(action, store)
            elif isinstance(action, GapFound):
                self.metrics.inc("sds_missing_total", len(action.entries))
                self.missing(action.entries)
            elif isinstance(action, Penalize):
                if self.standing is not None:
                    self.standing.penalise(action.peer, action.penalty, action.count)
            elif isinstance(action, ClaimsLapsed):
                self.metrics.inc("recon_claims_lapsed_total", action.count)
            elif isinstance(action, SessionFailed):
                if action.kind is not None:
                    self.metrics.inc("recon_protocol_errors_total", reason=action.kind.value)
            elif isinstance(action, KeysWithheld):
                self.metrics.inc("recon_keys_withheld_total", action.count)
                log.info("peer withheld advertised events",
                         extra=kv(peer=action.peer, keys=action.count))
            elif isinstance(action, Rejected):
                self.metrics.inc("events_rejected_total", reason=action.kind.value)
                log.info("rejected event", extra=kv(peer=action.peer or "?",
                                                    reason=action.reason))
            # Released, ReconcileSoon: the core poked its scheduler; the wake-up below lets the
            # loop see it. ReadStored: answered by ``claim``, the one place the core asks for a
            # read of the store.
        if wake:
            self._wake.set()

    def _carry_out_channel(self, action: _ChannelAction, store: bool) -> None:
        """What a channel's step reported (none of it moves the core's own timer)."""
        if isinstance(action, StoreDelivered):
            if action.records:
                if store:
                    self.store.submit(list(action.records), prompt=action.prompt)
                self.metrics.inc("events_delivered_total", len(action.records),
                                 channel=action.channel)
            self.dirty.add(action.channel)
            self._channel_wake.set()  # its timers may have moved
        elif isinstance(action, Broadcast):
            self.outbox.queue(action.channel, action.datagram)
        elif isinstance(action, StoreFetched):
            self.store.submit_fetched(list(action.records))
            for channel, count in action.bulk:
                self.metrics.inc("events_delivered_total", count, channel=channel)
                self.dirty.add(channel)
        elif isinstance(action, ChannelNote):
            self._count(action)
        elif isinstance(action, UnsignedAccepted):
            # docs/interop.md: the trust trade-off of a waku channel.
            self.metrics.inc("sds_unsigned_accepted_total", action.count,
                             channel=action.channel)
        elif isinstance(action, StepDropped):
            log.warning("channel step dropped: its store questions kept changing",
                        extra=kv(channel=action.channel))
        # ReadLog: answered by ``step``.

    def _count(self, note: ChannelNote) -> None:
        event = note.event
        if isinstance(event, RepairRequested):
            self.metrics.inc("sds_repairs_requested_total", len(event.message_ids))
        elif isinstance(event, Evicted):
            self.metrics.inc("sds_evicted_total", buffer=event.buffer)
        elif (counter := EVENT_COUNTERS.get(type(event))) is not None:
            self.metrics.inc(counter)

    async def step(self, actions: Sequence[Action]) -> None:
        """Carry out a channel step's actions; while it waits for a read of the log
        (``ReadLog``), read the store and feed the answer back."""
        while True:
            self.carry_out(actions, wake=False)
            read = next((a for a in actions if isinstance(a, ReadLog)), None)
            if read is None:
                return
            found = await self.reads.read(read.channel, read.read.ids)
            actions = self.core.channels.delivered_read(read.channel, found)

    async def channel_timers(self) -> None:
        """The SDS channels' timers, on the wall clock (SDS's timestamps are wall time)."""
        channels = self.core.channels
        while True:
            now = self.clock.wall()
            due = channels.get_timer()
            if due is not None and due <= now:
                self.carry_out(channels.handle_timer(now), wake=False)
                due = channels.get_timer()
            self._channel_wake = trio.Event()
            # At least 5 ms: a timer its own handling set again at once waits that long.
            wait = (math.inf if due is None else due) - self.clock.wall()
            with trio.move_on_after(min(max(wait, 0.005), 5.0)):
                await self._channel_wake.wait()

    def wake(self) -> None:
        """Let the loop look at the core's timer again (a session ended)."""
        self._wake.set()

    # -- inputs --------------------------------------------------------------------------------

    def poke(self) -> None:
        """Reconcile soon (e.g. after a new peer connected or a gap was seen)."""
        self.core.poke()
        self._wake.set()

    def missing(self, entries: Sequence[MissingEntry]) -> None:
        """SDS found events' dependencies missing: the few ids a gap names are fetched by id,
        and its senders are prompted for a Recon session at once (a burst lost on a restart
        is more than fetch by id asks for)."""
        at_once, deferred = self.core.missing(entries, self.host.connected_peers(),
                                              self.clock.now())
        self.prompted("gap", at_once, deferred)

    def prompted(self, reason: str, at_once: int, deferred: int) -> None:
        for outcome, count in (("at_once", at_once), ("deferred", deferred)):
            if count:
                self.metrics.inc("recon_prompts_total", count, reason=reason, outcome=outcome)
        self._wake.set()

    def connected(self, peer: str, inbound: bool) -> None:
        at_once = self.core.connected(peer, self.host.connected_peers(), self.clock.now(),
                                      dialled=not inbound)
        if at_once is None:
            self._wake.set()  # a stranger's connection: the round, not a prompt
        else:
            self.prompted("connected", int(at_once), int(not at_once))

    def disconnected(self, peer: str) -> None:
        self.core.disconnected(peer, self.clock.now())

    def queued(self, records: Sequence[EventRecord]) -> None:
        """Records entered the store's queue: fetched keys among them stay claimed until
        their commit, however slow."""
        self.core.queued(r.recon_key for r in records)

    def committed(self, result: AppendResult, records: Sequence[EventRecord]
                  ) -> tuple[list[bytes], int]:
        """The store committed ``records`` (``result``: what was new). Every record ends its
        claim's hold here: stored, a duplicate, or not stored at all (then it may be fetched
        again). Returns (the new keys, how many of them Recon fetched)."""
        new = {m for _, m in result.inserted}
        stored, fetched = self.core.committed(
            [r.recon_key for r in records],
            {r.recon_key for r in records if r.message_id in new})
        if stored:
            self._wake.set()
        return stored, fetched

    # -- the store's reports -------------------------------------------------------------------

    async def store_reports(self, committed: Callable[[Committed], None],
                            failed: Callable[[Failed], None]) -> None:
        """Read the store's reports as they come (``node.store.reports``): a queued record's
        claim is held (``queued``), a commit goes to ``committed`` (the key store's side, which
        calls :meth:`committed`), records no backend could store to ``failed`` (the channels
        undo their delivery)."""
        async for report in self.store.reports:
            self._take(report, committed, failed)

    def drain_reports(self, committed: Callable[[Committed], None],
                      failed: Callable[[Failed], None]) -> None:
        """Take the reports already there (the last commits at shutdown, before the key store's
        summary is saved), without waiting for more."""
        while True:
            try:
                report = self.store.reports.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return
            self._take(report, committed, failed)

    def _take(self, report: StoreReport, committed: Callable[[Committed], None],
              failed: Callable[[Failed], None]) -> None:
        if isinstance(report, Queued):
            self.queued(report.records)
        elif isinstance(report, Committed):
            committed(report)
        else:
            failed(report)

    async def claim(self, plan: SessionPlan) -> tuple[int, list[bytes]]:
        """A session's fetch phase begins: claim what its reconciliation found missing, answer
        the core's ``ReadStored`` from the store, and return (the claim ticket, the keys to
        fetch)."""
        actions = self.core.want(plan, self.clock.now(), int(self.clock.wall() * 1000))
        self.carry_out(actions)
        read = actions[-1]
        assert isinstance(read, ReadStored)
        held: set[bytes] = (await self.store.read(existing_keys, list(read.keys))
                            if read.keys else set())
        return read.ticket, self.core.sessions.stored(read.ticket, held)

    # -- the timer loop ------------------------------------------------------------------------

    async def rounds(self, start: Callable[[str], Awaitable[None]],
                     fetch: Callable[[FetchPlan], Awaitable[None]],
                     still_missing: Callable[[str], bool]) -> None:
        """The core's timer: lapsed claims, prompt sessions, rounds and fetches by id. Each
        session it starts runs ``start(peer)`` in a task of its own; each fetch it makes due
        runs ``fetch(plan)`` (one at a time: the core makes the next due once it is back),
        planned on what SDS still misses (``still_missing(message_id)``)."""
        async with trio.open_nursery() as nursery:
            while True:
                now = self.clock.now()
                if now >= self.core.get_timer():
                    actions = self.core.handle_timer(now, self.host.connected_peers(),
                                                     self.host.latencies())
                    self.carry_out(actions)
                    for action in actions:
                        if isinstance(action, StartSession):
                            nursery.start_soon(start, action.peer)
                        elif isinstance(action, FetchDue):
                            nursery.start_soon(self._fetch, action, fetch, still_missing)
                    continue
                self._wake = trio.Event()
                with trio.move_on_after(self.core.get_timer() - now):
                    await self._wake.wait()

    async def _fetch(self, due: FetchDue, fetch: Callable[[FetchPlan], Awaitable[None]],
                     still_missing: Callable[[str], bool]) -> None:
        ended: FetchDue | FetchPlan = due  # however it ends, the core hears of it
        try:
            connected = self.host.connected_peers()
            ended = self.core.plan_fetch(due, {e.message_id for e in due.batch
                                               if still_missing(e.message_id)},
                                         connected, {p for p in connected
                                                     if self.host.is_banned(p)})
            await fetch(ended)
        finally:
            self.carry_out(self.core.fetched(ended))
