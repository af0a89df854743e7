"""How SDS, fetch-by-id and Recon divide the work of closing a gap, sans-IO.

When SDS reports a message missing (a causal dependency it has not delivered):

1. **SDS repair first**: for ``grace_s`` nothing else happens. Most gaps close by themselves
   within moments (the event is in flight on gossip, SDS-R repair answers it, or a running
   Recon session delivers its range).
2. **Fetch by id** then, if it is still missing: ids go in batches of at most ``max_ids`` to
   the original senders first (they certainly had the events), then ``extra_peers`` others in a
   random order (the load of answering spreads); never a banned peer.
3. **Recon** for whatever nobody answered: the scheduler is poked, so a session reconciles the
   range soon (``ReconcileSoon``); Recon finds it by key, whoever holds it.

A peer whose fetch answer breaks the protocol pays by the error's kind.

SDS-R's own requests wait ``T_req`` >= ``t_min`` (30 s by default), so they go out only for
what fetch-by-id and Recon did not close: a repair request and its answers are group-wide
floods, a fetch is one request and one copy on one link (docs/replication.md "Closing gaps").
``t_min`` below ``FETCH_GRACE_S`` would send the floods first; the node refuses such a
configuration.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from sync.actions import Action, Penalize, ReconcileSoon
from sync.errors import RemoteProtocolError
from sync.peerscore import penalty_of
from sync.sds import MissingEntry
from sync.transfer import FetchQueue, plan_peers

__all__ = ["FETCH_GRACE_S", "FetchPlan", "GapPlanner"]

#: The node's ``grace_s``: how long a gap is left to close by itself before it is fetched by id.
FETCH_GRACE_S = 1.0


@dataclass
class FetchPlan:
    """Ask ``peers`` in order for ``ids`` (each next peer only for what is still wanted);
    hand the plan back to ``GapPlanner.done`` after."""

    batch: list[MissingEntry]
    ids: set[str]
    peers: list[str]


class GapPlanner:
    def __init__(self, grace_s: float, max_ids: int, rng: random.Random,
                 extra_peers: int = 3) -> None:
        self.queue = FetchQueue(grace_s, max_ids)
        self.extra_peers = extra_peers
        self.rng = rng

    def missing(self, entries: Iterable[MissingEntry], now: float) -> None:
        """SDS reported ``entries`` missing at ``now``."""
        self.queue.want(entries, now)

    def get_timer(self) -> float | None:
        return self.queue.get_timer()

    def handle_timer(self, now: float) -> list[MissingEntry]:
        """The batch due for a fetch at ``now`` (empty: none). Some may have arrived since SDS
        reported them: the driver answers with those SDS still misses (:meth:`plan`)."""
        return self.queue.handle_timer(now)

    def plan(self, batch: list[MissingEntry], still_missing: Collection[str],
             connected: Sequence[str], banned: Collection[str]) -> FetchPlan:
        """The fetch of ``batch`` (:meth:`handle_timer`'s): only its ids in ``still_missing``."""
        wanted = [e for e in batch if e.message_id in still_missing]
        up = set(connected)
        senders = [e.sender_id for e in wanted if e.sender_id in up]
        peers = plan_peers(senders, connected, self.extra_peers,
                           frozenset(p for p in connected if p in banned), self.rng)
        return FetchPlan(batch, {e.message_id for e in wanted}, peers if wanted else [])

    def received(self, plan: FetchPlan, message_id: str) -> None:
        plan.ids.discard(message_id)

    def bad_answer(self, peer: str, error: RemoteProtocolError) -> list[Action]:
        return [Penalize(peer, penalty_of(error.kind))]

    def done(self, plan: FetchPlan) -> list[Action]:
        """The fetch ended: what is still wanted is left to Recon."""
        self.queue.done(plan.batch)
        return [ReconcileSoon(len(plan.ids))] if plan.ids else []
