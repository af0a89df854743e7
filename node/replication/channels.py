"""SDS over GossipSub: the node's gossip subscriptions and its API's publishing, feeding the SDS
channels that ``ReplicationCore`` holds (``sync.replication.ChannelSet``), whose actions the one
``ReplicationDriver`` carries out (deliveries stored through the batched ``EventStore``,
resends, sync messages and repair answers published on the channel's topic).

Gossip, Recon and the fetch protocol (``channel_ingest.py``) all feed the same channels; their
timers run in the driver (``ReplicationDriver.channel_timers``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio
from sqlalchemy import Connection

from node.replication.channel_ingest import FetchedIngest
from node.replication.channel_metrics import describe_channel_metrics
from node.replication.driver import ReplicationDriver
from node.replication.gossip_outbox import topic_of
from node.store.reports import Failed
from storage import put_state
from sync.errors import LocalProtocolError
from sync.gossip import publisher_pays
from sync.replication import Broadcast, StoreDelivered
from sync.sds import Delivered, SdsChannel
from sync.sds.state import encode_state

__all__ = ["ChannelService", "UnknownChannel"]

STATE_SAVE_INTERVAL_S = 5.0


class UnknownChannel(KeyError):
    pass


class ChannelService:
    def __init__(self, driver: ReplicationDriver, *, member_estimate: int = 0) -> None:
        self.driver = driver
        self.core = driver.core.channels
        self.host = driver.host
        self.store = driver.store
        self.metrics = driver.metrics
        self.clock = driver.clock
        self.network_id = self.core.network_id
        #: The core's channels, by name (read by the API's status and the tests).
        self.channels = self.core.channels
        self.names = list(self.channels)
        #: channel -> SDS profile (sync.sds.profile).
        self.profiles = {name: ch.setup.profile.name for name, ch in self.channels.items()}
        #: sds.member_estimate: > 0 overrides what the node counts (``estimate_members``).
        self.member_estimate = member_estimate
        #: The one path of events fetched by Recon or by id into the channels.
        self.fetched = FetchedIngest(driver)
        describe_channel_metrics(self.metrics, self.channels, self.store)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for name in self.names:
                receiver = await self.host.subscribe(topic_of(self.network_id, name))
                nursery.start_soon(self._gossip_loop, name, receiver)
            nursery.start_soon(self.driver.channel_timers)
            nursery.start_soon(self.driver.outbox.run)
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
        self.channel(name)
        started = self.clock.now()
        # A waku channel: were these payloads sent already?
        await self.driver.reads.answer_all(
            self.core, lambda: {name: self.core.publish_reads(name, contents)})
        out = self.core.publish(name, contents, self.clock.wall())
        # Our own deliveries are committed here, in the caller's transaction: the rest of
        # what the step reported is carried out as any other.
        records = [r for a in out.actions if isinstance(a, StoreDelivered) for r in a.records]
        self.driver.carry_out(out.actions, store=False, wake=False)
        own = out.own
        await self.store.append(
            records, None if also is None else (lambda conn: also(conn, own[-1])))
        self.metrics.observe("publish_commit_seconds", self.clock.now() - started)
        # Gossiped only once committed: a peer never holds what we could still lose.
        self.driver.carry_out([Broadcast(name, wire) for wire in out.wires], wake=False)
        self.metrics.inc("events_published_total", len(out.wires), channel=name)
        error = out.error
        if error is not None and not isinstance(error, LocalProtocolError):
            raise error
        return own, error

    def is_missing(self, message_id: str) -> bool:
        return self.core.is_missing(message_id)

    # -- loops -------------------------------------------------------------------------------

    async def _gossip_loop(self, name: str, receiver: trio.MemoryReceiveChannel[object]) -> None:
        async with receiver:
            async for message in receiver:
                data: bytes = message.data  # type: ignore[attr-defined]
                peer: str = message.from_peer  # type: ignore[attr-defined]
                forwarder: str | None = getattr(message, "forwarder", None)
                self.metrics.inc("gossip_bytes_received_total", len(data))
                now = self.clock.wall()
                # An honest neighbour relaying somebody's flood is throttled with it but not
                # penalised: GossipSub forwards before we validate (sync.gossip). Charged when
                # the message came off its stream, not when this loop got to it: a loop that
                # fell behind (a busy node storing a burst) would otherwise take a paced burst
                # in clumps and charge our own delay to the peer.
                arrived = getattr(message, "received_at", None) or now
                direct = publisher_pays(peer, forwarder)
                actions, items = self.core.gossip(data, forwarder or peer, peer, arrived,
                                                  direct=direct)
                if actions:
                    self.driver.carry_out(actions, wake=False)
                for item in items:
                    if stepped := self.core.receive(name, item, now, peer, penalise=direct):
                        await self.driver.step(stepped)
                if items:  # what the items delivered, stored as one
                    self.driver.carry_out(self.core.drain(name), wake=False)

    def undeliver(self, report: Failed) -> None:
        """Records no backend could store (the store's report, read by the driver): no
        longer delivered, so a resend, a repair or Recon may bring them again."""
        for channel, count in self.core.undeliver(report.records).items():
            self.metrics.inc("events_store_failed_total", count, channel=channel)

    def estimate_members(self) -> None:
        """Give each channel the node's member estimate (SDS-R response groups are
        ``N div 128 + 1``; the channel takes the larger of this and the senders it heard)."""
        allowed = self.core.policy.members
        for name in self.channels:
            members = self.member_estimate
            if not members:  # the closed group, else our neighbours on the topic and us
                members = len(allowed or ()) or len(self.host.gossip_peers(
                    topic_of(self.network_id, name))) + 1
            self.core.set_members(name, members)

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
        names = list(self.channels) if all_channels else sorted(self.driver.dirty)
        self.driver.dirty.clear()
        now_ms = int(self.clock.wall() * 1000)
        for name in names:
            await self.store.write(put_state, f"sds/{name}",
                                   encode_state(self.core.state(name)), now_ms)
