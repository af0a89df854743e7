"""Events fetched by Recon or by id entering the SDS channels: the driver of the one ingest path
(``ChannelSet.ingest``: ``sync.replication.ingest_batch``, which holds every rule: refusals and
their penalties, own echoes, SDS's bulk path or its full step, in causal order). This module
first answers what the channels will ask of their logs for the batch
(``ChannelSet.ingest_reads``, read from the store before the steps run, never inside one), then
hands what the core returns to the driver (stored, counted, charged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sync.ingest import VerifiedBatch, verify_wires
from sync.peerscore import penalty_of
from sync.replication import Penalize, Rejected, order, screen

if TYPE_CHECKING:
    from node.replication.driver import ReplicationDriver

__all__ = ["FetchedIngest"]


class FetchedIngest:
    def __init__(self, driver: ReplicationDriver) -> None:
        self.driver = driver
        self.channels = driver.core.channels
        # The channels are fixed once the node is built: their spec is made once, not per
        # event fetched by id.
        self.spec = self.channels.spec

    async def ingest(self, wire: bytes, peer: str | None, now: float | None = None
                     ) -> str | None:
        """Feed one event fetched by id; its message id, or None if rejected. Verified here
        (it is one event) and then the same path as a Recon batch."""
        batch = verify_wires(self.spec, [wire])
        actions, error = screen(batch, peer or "")
        if error is not None:
            kind = next(a.kind for a in actions if isinstance(a, Rejected))
            refused: list[Rejected | Penalize] = [Rejected(peer, kind, error.reason)]
            if peer is not None:
                refused.append(Penalize(peer, penalty_of(kind)))
            self.driver.carry_out(refused, wake=False)
            return None
        count = await self.ingest_verified(batch, [wire], [0], peer, now)
        return None if count else batch.message_ids[0]

    async def ingest_verified(self, batch: VerifiedBatch, wires: Sequence[bytes],
                              positions: Sequence[int] | None, peer: str | None,
                              now: float | None = None) -> int:
        """Feed events the ingest workers (or threads) decoded and verified; ``positions``:
        which to take (None: all, in causal order). Returns how many were refused (counted and
        charged to ``peer``)."""
        taken = order(batch) if positions is None else positions
        # Every channel's questions answered, then the batch run with no await between.
        await self.driver.reads.answer_all(self.channels,
                                           lambda: self.channels.ingest_reads(batch, taken))
        when = self.driver.clock.wall() if now is None else now
        actions, refused = self.channels.ingest(batch, wires, taken, peer, when)
        self.driver.carry_out(actions, wake=False)
        return refused
