"""The driver's side of an SDS channel's storage questions: a bounded channel keeps only its
newest delivered ids in memory and, when a step must know about an older one, raises
``sync.sds.DeliveredNeeded`` before it changes anything (or names its questions up front:
``SdsChannel.log.reads_for_steps``, ``sync.sds.waku.send_reads``). Here the store answers
(its queue of uncommitted writes, then the database in a worker thread: never on the protocol
step) and the channel takes the answer; the caller then runs the same step again, as Recon's
``KeysNeeded`` driver does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from node.store.events import EventStore
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.sds import DeliveredNeeded, ReadDelivered, SdsChannel

__all__ = ["DeliveredReads"]

log = logging.getLogger("syncnode.channels")
#: Reads of one question before its "not delivered" answers are taken whatever came in
#: meanwhile (each retry means a whole delivered window arrived while the store was read).
ATTEMPTS = 3
#: Runs of one step before it is given up (each run after the first follows an answer; a
#: second question means other tasks changed the channel while the store was read).
STEP_RUNS = 8


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
        for attempt in range(1, ATTEMPTS + 1):
            found = await self.read(name, read.ids)
            if ch.log.answer(read, found, force=attempt == ATTEMPTS):
                return
            # Asked again from now: what memory held still is, what it lacked may not be.
            read = ReadDelivered(read.ids + tuple(read.not_held), read.held,
                                 epoch=ch.log.added)

    async def answer_all(self, channels: Mapping[str, SdsChannel],
                         requests: Callable[[], Mapping[str, ReadDelivered]]) -> None:
        """Answer every channel's request of ``requests()`` (channel name -> request): all
        read first, then all answered with no await between, so no other step can replace an
        answer before the caller's step (run right after) uses it. Asked again while an answer
        came back stale, as :meth:`answer` does for one channel."""
        for attempt in range(1, ATTEMPTS + 1):
            reads = requests()
            found = {name: await self.read(name, read.ids) for name, read in reads.items()}
            fresh = [channels[name].log.answer(read, found[name],
                                                     force=attempt == ATTEMPTS)
                     for name, read in reads.items()]
            if all(fresh):
                return

    async def step(self, name: str, ch: SdsChannel, run: Callable[[], object]) -> bool:
        """``run()`` (one channel step); when it needs delivered ids, read them and run it
        again. False if it still asks after ``STEP_RUNS`` runs (the input is dropped: a
        resend, a repair or Recon brings it again)."""
        for _ in range(STEP_RUNS):
            try:
                run()
                return True
            except DeliveredNeeded as need:
                await self.answer(name, ch, need.read)
        log.warning("channel step dropped: its store questions kept changing",
                    extra=kv(channel=name))
        return False
