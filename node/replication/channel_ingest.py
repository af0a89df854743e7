"""Events fetched by Recon or by id entering the SDS channels: one at a time through the full
protocol step, or a batch the ingest workers verified, sorted by ``sync.ingest.triage`` and
delivered in bulk where SDS allows (``SdsChannel.deliver_settled``).

:class:`FetchedIngest` is a part of :class:`node.replication.channels.ChannelService`, kept
apart because it is the one path fetched events take; it uses the service's channels, sender
policy, store and counters.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

from node.metrics import Metrics
from node.store import EventStore
from storage import EventRecord
from sync.errors import RemoteProtocolError
from sync.gossip import SenderCheck, SenderPolicy
from sync.ingest import VerifiedBatch, triage
from sync.sds import SdsChannel, SdsConfig, SignedEvent
from sync.sds.profile import decode_event_in, peek_event
from sync.stored_event import record_of_event

__all__ = ["FetchedIngest"]


class FetchedIngest(ABC):
    channels: dict[str, SdsChannel]
    policy: SenderPolicy
    store: EventStore
    metrics: Metrics
    sds_config: SdsConfig
    network_id: int
    event_id_layout: str
    _dirty: set[str]

    # The service's own steps, which fetched events share with gossip input (ChannelService).
    @abstractmethod
    def _reject(self, exc: RemoteProtocolError, peer: str | None,
                penalty: str | None = None, *, penalise: bool = True) -> None:
        """Count a refused input and charge ``peer``."""

    @abstractmethod
    def _after_input(self, name: str) -> None:
        """Store what channel ``name`` delivered after an input."""

    @abstractmethod
    def _count_unsigned(self, ch: SdsChannel, name: str) -> None:
        """Count unsigned messages a channel accepted."""

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
                # Stored directly (signature checked) when SDS says we no longer hold it.
                own = verified or decode_event_in(ch.profile.name, wire)
                if ch.stores_own_echo(own):
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
        senders, lamports, names = batch.senders, batch.lamports, batch.channels
        sorted_out = triage(batch, order, self.channels, self.policy, when,
                            self.sds_config.max_lamport_ahead_ms)
        for _, exc in sorted_out.refused:
            self._reject(exc, peer)
        refused = len(sorted_out.refused)
        full = sorted_out.full
        records: list[EventRecord] = []
        for name, taken in sorted_out.settled.items():
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
