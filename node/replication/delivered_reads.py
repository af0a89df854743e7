"""The driver's side of an SDS channel's storage questions: a bounded channel keeps only its
newest delivered ids in memory and, when a received message must know about an older one,
holds it and returns the request ``sync.sds.ReadDelivered`` (or names its questions up front:
``SdsChannel.layers.log.reads_for_steps``, ``sync.sds.waku.send_reads``). Here the store answers
(its queue of uncommitted writes, then the database in a worker thread: never on the protocol
step) and the answer goes back to the channel as its input ``DeliveredRead``, as Recon's
key-store reads do (``ReadKeys`` and ``KeysRead``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from node.store.events import EventStore
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.sds import DeliveredRead, ReadDelivered, SdsChannel
from sync.sds.delivered import STALE_ANSWERS

__all__ = ["DeliveredReads"]

log = logging.getLogger("syncnode.channels")
#: Reads for one received message before it is given up: up to 8 questions (a second one
#: means other tasks changed the channel while the store was read), each asked up to
#: ``sync.sds.STALE_ANSWERS`` times.
MAX_READS = 8 * STALE_ANSWERS


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

    async def answer(self, name: str, ch: SdsChannel, read: ReadDelivered) -> None:
        """Read ``read`` and hand the answer to ``ch``; run the step right after (no await)."""
        for attempt in range(1, STALE_ANSWERS + 1):
            found = await self.read(name, read.ids)
            if ch.layers.log.answer(read, found, force=attempt == STALE_ANSWERS):
                return
            read = read.again(ch.layers.log.added)

    async def answer_all(self, channels: Mapping[str, SdsChannel],
                         requests: Callable[[], Mapping[str, ReadDelivered]]) -> None:
        """Answer every channel's request of ``requests()`` (channel name -> request): all
        read first, then all answered with no await between, so no other step can replace an
        answer before the caller's step (run right after) uses it. Asked again while an answer
        came back stale, as :meth:`answer` does for one channel."""
        for attempt in range(1, STALE_ANSWERS + 1):
            reads = requests()
            found = {name: await self.read(name, read.ids) for name, read in reads.items()}
            fresh = [channels[name].layers.log.answer(read, found[name],
                                                     force=attempt == STALE_ANSWERS)
                     for name, read in reads.items()]
            if all(fresh):
                return

    async def received(self, name: str, ch: SdsChannel, read: ReadDelivered | None) -> bool:
        """Carry out what ``ch.receive`` returned: while it is a request, read the store and
        feed the answer back (``ch.delivered_read``). False if the message still asks after
        ``MAX_READS`` reads: it is dropped (a resend, a repair or Recon brings it again)."""
        for _ in range(MAX_READS):
            if read is None:
                return True
            found = await self.read(name, read.ids)
            read = ch.delivered_read(DeliveredRead(read, frozenset(found)))
        if read is None:
            return True
        ch.delivered_read(None)
        log.warning("channel step dropped: its store questions kept changing",
                    extra=kv(channel=name))
        return False
