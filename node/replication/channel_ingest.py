"""Events fetched by Recon or by id entering the SDS channels: the driver of the one ingest path
(``sync.replication.ingest_batch``), which holds every rule (refusals and their penalties, own
echoes, SDS's bulk path or its full step, in causal order). This module first answers what the
channels will ask of their logs for the batch (``sync.replication.ingest_reads``, read from the
store before the steps run, never inside one), then stores what they delivered, counts and
charges what they refused.

:class:`ChannelService` holds one :class:`FetchedIngest`, built with the service's channels,
sender policy, store and counters, and the service's steps it shares with gossip input
(:class:`ChannelSteps`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from node.replication.clock import Clock
from node.replication.delivered_reads import DeliveredReads
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from sync.errors import RemoteProtocolError
from sync.gossip import SenderPolicy
from sync.ingest import IngestSpec, VerifiedBatch, verify_wires
from sync.replication import Penalize, Rejected, ingest_batch, ingest_reads, order, screen
from sync.sds import SdsChannel

__all__ = ["ChannelSteps", "FetchedIngest"]


class ChannelSteps(Protocol):
    """The channel service's steps fetched events share with gossip input."""

    def reject(self, exc: RemoteProtocolError, peer: str | None,
               penalty: str | None = None, *, penalise: bool = True) -> None:
        """Count a refused input and charge ``peer``."""

    def penalise(self, peer: str, penalty: str) -> None:
        """Charge ``peer``."""

    def after_input(self, name: str, *, fetched: bool = False) -> None:
        """Store what channel ``name`` delivered after an input (``fetched``: a fetched
        batch's, committed without the relayed events' gathering delay)."""

    def mark_dirty(self, name: str) -> None:
        """Channel ``name``'s state changed."""


class FetchedIngest:
    def __init__(self, *, channels: dict[str, SdsChannel], policy: SenderPolicy,
                 store: EventStore, metrics: Metrics, reads: DeliveredReads, spec: IngestSpec,
                 max_lamport_ahead_ms: int, clock: Clock, steps: ChannelSteps) -> None:
        self.channels = channels
        self.policy = policy
        self.store = store
        self.metrics = metrics
        self.reads = reads
        self.spec = spec
        self.max_lamport_ahead_ms = max_lamport_ahead_ms
        self.clock = clock
        self.steps = steps

    async def ingest(self, wire: bytes, peer: str | None, now: float | None = None
                     ) -> str | None:
        """Feed one event fetched by id; its message id, or None if rejected. Verified here
        (it is one event) and then the same path as a Recon batch."""
        batch = verify_wires(self.spec, [wire])
        actions, error = screen(batch, peer or "")
        if error is not None:
            kind = next(a.kind for a in actions if isinstance(a, Rejected))
            self.steps.reject(RemoteProtocolError(error.reason, peer, kind), peer)
            return None
        refused = await self.ingest_verified(batch, [wire], [0], peer, now)
        return None if refused else batch.message_ids[0]

    async def ingest_verified(self, batch: VerifiedBatch, wires: Sequence[bytes],
                              positions: Sequence[int] | None, peer: str | None,
                              now: float | None = None) -> int:
        """Feed events the ingest workers (or threads) decoded and verified; ``positions``:
        which to take (None: all, in causal order). Returns how many were refused (counted and
        charged to ``peer``)."""
        taken = order(batch) if positions is None else positions
        # Every channel's questions answered, then the batch run with no await between.
        await self.reads.answer_all(self.channels,
                                    lambda: ingest_reads(batch, taken, self.channels))
        when = self.clock.wall() if now is None else now
        out = ingest_batch(batch, wires, taken, peer, self.channels, self.policy, when,
                           self.max_lamport_ahead_ms)
        for action in out.actions:
            if isinstance(action, Rejected):
                self.steps.reject(RemoteProtocolError(action.reason, peer, action.kind), peer,
                             penalise=False)
            elif isinstance(action, Penalize):
                self.steps.penalise(action.peer, action.penalty)
        for name, count in out.bulk.items():
            self.metrics.inc("events_delivered_total", count, channel=name)
            self.steps.mark_dirty(name)
        if out.records:
            self.store.submit_fetched(out.records)
        for name, count in out.stepped.items():
            # A waku channel took messages nobody signed (docs/interop.md, the trust trade-off).
            if self.channels[name].setup.profile.is_waku:
                self.metrics.inc("sds_unsigned_accepted_total", count, channel=name)
        for name in sorted(out.touched):
            self.steps.after_input(name, fetched=True)
        return out.refused
