"""The driver's side of an SDS channel's storage questions: a bounded channel keeps only its
newest delivered ids in memory and, when a received message must know about an older one,
holds it and asks (the action ``sync.replication.ReadLog``; or names its questions up front:
``ChannelSet.publish_reads``, ``ChannelSet.ingest_reads``). Here the store answers (its queue of
uncommitted writes, then the database in a worker thread: never on the protocol step) and the
answer goes back to the core, as Recon's key-store reads do (``ReadKeys`` and ``KeysRead``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from sync.replication import ChannelSet
from sync.sds import ReadDelivered
from sync.sds.delivered import STALE_ANSWERS

__all__ = ["DeliveredReads"]


class DeliveredReads:
    def __init__(self, store: EventStore, metrics: Metrics) -> None:
        self.store = store
        self.metrics = metrics

    async def read(self, name: str, ids: tuple[str, ...]) -> set[str]:
        """Those of ``ids`` in channel ``name``'s log, committed or queued."""
        if not ids:
            return set()
        self.metrics.inc("sds_store_lookups_total")
        return await self.store.stored_ids(name, ids)

    async def answer_all(self, channels: ChannelSet,
                         requests: Callable[[], Mapping[str, ReadDelivered | None]]) -> None:
        """Answer every channel's request of ``requests()`` (channel name -> request): all
        read first, then all answered with no await between, so no other step can replace an
        answer before the caller's step (run right after) uses it. Asked anew while an answer
        came back stale (``STALE_ANSWERS`` times, the last taken anyway)."""
        for attempt in range(1, STALE_ANSWERS + 1):
            reads = {name: read for name, read in requests().items() if read is not None}
            found = {name: await self.read(name, read.ids) for name, read in reads.items()}
            fresh = [channels.answer_log(name, read, found[name], last=attempt == STALE_ANSWERS)
                     for name, read in reads.items()]
            if all(fresh):
                return
