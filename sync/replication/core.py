"""``ReplicationCore``: the one replication core of a node, sans-IO.

Every input of replication that is not a session's own goes in here with ``now``, and typed
actions (``sync.actions``) come out: the timer (``get_timer`` / ``handle_timer``,
one for Recon rounds, prompt sessions, lapsed claims and fetches by id), connections coming and
going, gaps SDS reports (``missing``), and the store's reports of its queue and commits. The
core holds two parts, each a rule set of its own and reachable for the calls of a session in
flight: ``sessions`` (:class:`ReconLifecycle`: Recon sessions, their claims and backlog; a
session's runner calls ``begin``, ``want``, ``stored``, ``finished``... on it) and ``gaps``
(:class:`GapPlanner`: how repair, fetch by id and Recon divide a gap). What ties the two
together is a rule of this core, not of a driver:

* a gap SDS reports is queued for a fetch by id and prompts a session with its senders at once
  (a burst lost on a restart is more than fetch by id asks for);
* one fetch by id at a time: when one is due the core returns ``FetchDue(batch)``; the driver
  answers which of its ids are still missing (``plan_fetch``), fetches, and hands the plan back
  (``fetched``), and only then is the next one due;
* what a fetch could not close is Recon's: the core pokes its own session scheduler
  (``ReconcileSoon`` still comes out, for the driver to count and wake up).

Driving it (``node.replication.driver.ReplicationDriver``; the simulator does the same with its
network model)::

    core = ReplicationCore(ReconLifecycle(...), GapPlanner(...))
    # whenever now >= core.get_timer():
    for action in core.handle_timer(now, connected, latencies):
        ...  # StartSession(peer): run a session; FetchDue(batch): plan_fetch, fetch, fetched
    core.connected(peer, connected, now, dialled=...); core.disconnected(peer, now)
    core.missing(entries, connected, now)       # SDS lacks these events' dependencies
    core.queued(keys); core.committed(keys, new)
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from sync.actions import Action, FetchDue, ReconcileSoon
from sync.replication.gaps import FetchPlan, GapPlanner
from sync.replication.lifecycle import ReconLifecycle
from sync.sds import MissingEntry

__all__ = ["ReplicationCore"]


class ReplicationCore:
    """One node's replication core: Recon sessions (``sessions``) and gap fetches (``gaps``)
    behind one timer, with the rules between them (see the module doc)."""

    def __init__(self, sessions: ReconLifecycle, gaps: GapPlanner) -> None:
        self.sessions = sessions
        self.gaps = gaps
        self._fetching = False

    # -- the timer ----------------------------------------------------------------------------

    def get_timer(self) -> float:
        """When :meth:`handle_timer` has something to do next (``math.inf``: nothing yet)."""
        due = self.sessions.get_timer()
        if not self._fetching and (fetch := self.gaps.get_timer()) is not None:
            due = min(due, fetch)
        return due

    def handle_timer(self, now: float, connected: Collection[str],
                     latencies: Mapping[str, float]) -> list[Action]:
        """What is due at ``now``: the sessions' (``StartSession``, lapsed claims and their
        penalties), then a fetch by id (``FetchDue``) unless one is running.
        ``latencies``: round trips (s) of the peers measured."""
        actions: list[Action] = []
        if now >= self.sessions.get_timer():
            actions += self.sessions.handle_timer(now, connected, latencies)
        fetch = self.gaps.get_timer()
        if not self._fetching and fetch is not None and now >= fetch:
            batch = self.gaps.handle_timer(now)
            if batch:
                self._fetching = True
                actions.append(FetchDue(batch))
        return actions

    # -- fetch by id --------------------------------------------------------------------------

    def plan_fetch(self, due: FetchDue, still_missing: Collection[str],
                   connected: Sequence[str], banned: Collection[str]) -> FetchPlan:
        """The fetch of ``due``: those of its ids SDS still misses, and whom to ask."""
        return self.gaps.plan(due.batch, still_missing, connected, banned)

    def fetched(self, ended: FetchPlan | FetchDue) -> list[Action]:
        """The fetch of ``ended`` ended, however (a ``FetchDue`` that never became a plan:
        nothing of it was fetched): what nobody answered is left to Recon, and the next fetch
        may come due."""
        self._fetching = False
        plan = ended if isinstance(ended, FetchPlan) else FetchPlan(
            ended.batch, {e.message_id for e in ended.batch}, [])
        actions = self.gaps.done(plan)
        if any(isinstance(a, ReconcileSoon) for a in actions):
            self.sessions.poke()
        return actions

    # -- what the node learns -----------------------------------------------------------------

    def missing(self, entries: Sequence[MissingEntry], connected: Collection[str],
                now: float) -> tuple[int, int]:
        """SDS lacks these events' dependencies: fetch them by id after the grace, and prompt
        a session with their senders; (prompted at once, deferred)."""
        self.gaps.missing(entries, now)
        return self.sessions.gap((e.sender_id for e in entries), connected, now)

    def connected(self, peer: str, connected: Collection[str], now: float, *,
                  dialled: bool) -> bool | None:
        """A connection to ``peer``: a prompt session with it (True: at once, False:
        deferred; None: a stranger's connection, left to the round)."""
        return self.sessions.connected(peer, connected, now, dialled=dialled)

    def disconnected(self, peer: str, now: float) -> None:
        self.sessions.disconnected(peer, now)

    def poke(self) -> None:
        """Reconcile soon (a new peer, a gap): the next round is due now."""
        self.sessions.poke()

    def queued(self, keys: Iterable[bytes]) -> None:
        """Records entered the store's queue: their claims are held until their commit."""
        self.sessions.queued(keys)

    def committed(self, keys: Sequence[bytes], new: Collection[bytes]) -> tuple[list[bytes], int]:
        """The store committed ``keys`` (``new``: those it did not hold); (the new keys, how
        many of them Recon fetched)."""
        return self.sessions.committed(keys, new)
