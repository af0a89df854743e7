"""``ReplicationCore``: the one replication core of a node, sans-IO.

Every input of replication goes in here with ``now``, and typed actions (``sync.actions``) come
out: the node's SDS channels (``channels``, a :class:`~sync.replication.ChannelSet`: gossip,
the reads of a channel's log, the channels' timers on the wall clock, publishing and fetched
events), the timer (``get_timer`` / ``handle_timer``, one for Recon rounds, prompt sessions,
lapsed claims and fetches by id), connections coming and going, gaps SDS reports
(``missing``), the store's reports of its queue and commits, and each session's own inputs: its
frames (``receive``), the charge for a frame (``charged``), its key-store reads
(``keys_read``) and its deadline (``handle_session_timer``). The core files each session's
reconciliation (``sync.transfer.ReconExchange``, built by ``begin`` on the core's
:class:`ExchangeSetup`) under the session's number; a driver holds only the
:class:`SessionPlan` it was given. Beside its channels, the core holds two rule sets:
``sessions`` (:class:`ReconLifecycle`: Recon sessions, their claims and backlog; a session's
transfer phases call ``stored``, ``delivered``, ``answer_done``... on it) and ``gaps``
(:class:`GapPlanner`: how repair, fetch by id and Recon divide a gap). What ties
them together is a rule of this core, not of a driver:

* a gap SDS reports is queued for a fetch by id and prompts a session with its senders at once
  (a burst lost on a restart is more than fetch by id asks for);
* one fetch by id at a time: when one is due the core returns ``FetchDue(batch)``; the driver
  answers which of its ids are still missing (``plan_fetch``), fetches, and hands the plan back
  (``fetched``), and only then is the next one due;
* what a fetch could not close is Recon's: the core pokes its own session scheduler
  (``ReconcileSoon`` still comes out, for the driver to count and wake up).

A session's steps (``start``, ``receive``, ``charged``, ``keys_read``) touch only that
session's reconciliation and the key store, never the core's shared state: the node runs them
in its Recon worker thread (``node.replication.recon_work``) while the event loop goes on with
the rest.

Driving it (``node.replication.driver.ReplicationDriver``; the simulator does the same with its
network model)::

    core = ReplicationCore(ReconLifecycle(...), GapPlanner(...), ExchangeSetup(keys, ...),
                           ChannelSet.of(channels, own_id, network_id, config=sds_config))
    # the channels: gossip, receive (-> ReadLog -> delivered_read), drain, handle_timer, publish
    actions, items = core.channels.gossip(data, neighbour, publisher, arrived, direct=True)
    # whenever now >= core.get_timer():
    for action in core.handle_timer(now, connected, latencies):
        ...  # StartSession(peer): run a session; FetchDue(batch): plan_fetch, fetch, fetched
    core.connected(peer, connected, now, dialled=...); core.disconnected(peer, now)
    core.missing(entries, connected, now)       # SDS lacks these events' dependencies
    core.queued(keys); core.committed(keys, new)
    # a session (StartSession, or a peer's stream):
    plan = core.begin(peer, role, now)          # None: not now (a responder answers BUSY)
    actions = core.start(plan)                  # the initiator's; a responder waits for a frame
    actions = core.receive(plan, frame, now)    # ... SendFrame, Charge, ReadKeys, Reconciled
    core.reconciled(plan); core.want(plan, now, wall_ms); ...; core.finished(plan)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from sync.actions import Action, FetchDue, ReconcileSoon, Role
from sync.errors import LocalProtocolError
from sync.recon import KeysRead, KeyStore, ReconConfig, ReconSession
from sync.replication.channels import ChannelSet
from sync.replication.gaps import FetchPlan, GapPlanner
from sync.replication.lifecycle import ReconLifecycle, SessionPlan
from sync.sds import MissingEntry
from sync.transfer import ReconExchange

__all__ = ["ExchangeSetup", "ReplicationCore"]


@dataclass(frozen=True)
class ExchangeSetup:
    """What each session's reconciliation is built on: the node's key store, the Recon
    settings, the bound on missing keys kept per session, the phase's deadline after its start
    (``recon.session_timeout_s``) and whether each frame is answered only once its sender was
    charged for it (``Charge``)."""

    keys: KeyStore
    config: ReconConfig
    max_missing_keys: int
    timeout_s: float = math.inf
    charging: bool = False


class ReplicationCore:
    """One node's replication core: its SDS channels (``channels``), Recon sessions
    (``sessions``) and gap fetches (``gaps``) behind one timer, with the rules between them
    (see the module doc)."""

    def __init__(self, sessions: ReconLifecycle, gaps: GapPlanner, exchanges: ExchangeSetup,
                 channels: ChannelSet) -> None:
        self.sessions = sessions
        self.gaps = gaps
        self.setup = exchanges
        self.channels = channels
        self._fetching = False
        self._exchanges: dict[int, ReconExchange] = {}

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

    # -- a session ----------------------------------------------------------------------------

    def begin(self, peer: str, role: Role, now: float) -> SessionPlan | None:
        """A session with ``peer`` begins (None: not now; a responder answers BUSY): its
        reconciliation is built and filed under the plan's number."""
        plan = self.sessions.begin(peer, role, now)
        if plan is None:
            return None
        setup = self.setup
        make = ReconSession.initiator if role is Role.INITIATOR else ReconSession.responder
        self._exchanges[plan.id] = ReconExchange(
            make(setup.keys, plan.interests, setup.config, peer=peer), setup.max_missing_keys,
            peer, scope=plan.scope, timeout_s=setup.timeout_s, started=now,
            charging=setup.charging)
        return plan

    def start(self, plan: SessionPlan) -> list[Action]:
        """The initiator's first frame (``SendFrame``), or the reads it needs first."""
        return self._exchange(plan).start()

    def receive(self, plan: SessionPlan, frame: bytes, now: float) -> list[Action]:
        """A frame of the session's peer: what to do, in order (``SendFrame``; ``Charge``: charge
        the peer, then :meth:`charged`; ``ReadKeys``: make the reads, then :meth:`keys_read`;
        ``Declined``, ``Abort`` or, last, ``Reconciled``: the reconciliation is over)."""
        return self._exchange(plan).receive(frame, now)

    def charged(self, plan: SessionPlan, now: float) -> list[Action]:
        """The peer was charged for the frame :meth:`receive` decoded: it is answered now."""
        return self._exchange(plan).charged(now)

    def keys_read(self, plan: SessionPlan, answer: KeysRead) -> list[Action]:
        """The reads a ``ReadKeys`` asked for: the step that asked goes on with them."""
        return self._exchange(plan).keys_read(answer)

    def session_timer(self, plan: SessionPlan) -> float:
        """The reconciliation's deadline (``math.inf`` once it is over)."""
        return self._exchange(plan).get_timer()

    def handle_session_timer(self, plan: SessionPlan, now: float) -> list[Action]:
        """``[Abort]`` once the deadline passed with the reconciliation still running."""
        return self._exchange(plan).handle_timer(now)

    def reconciled(self, plan: SessionPlan) -> None:
        """The reconciliation ended (``Reconciled``): what the peer said it is interested in
        guides the choice of later sessions' peers."""
        self.sessions.reconciled(plan, self._exchange(plan).session.peer_interests)

    def want(self, plan: SessionPlan, now: float, wall_ms: int) -> list[Action]:
        """The fetch phase begins with what the reconciliation found missing, in causal order
        (``ReconLifecycle.want``: lapsed claims settled, gossip's keys left out, the rest
        claimed; it ends with ``ReadStored``)."""
        return self.sessions.want(plan, self._exchange(plan).missing, now, wall_ms)

    def finished(self, plan: SessionPlan) -> bool:
        """The session went through (``plan.fetched`` set); whether the next session with this
        peer should start at once (what a truncated one left is cut into the backlog)."""
        exchange = self._exchange(plan)
        del self._exchanges[plan.id]
        return self.sessions.finished(plan, truncated=exchange.truncated,
                                      lowest_dropped=exchange.lowest_dropped, cuts=exchange.cuts)

    def failed(self, plan: SessionPlan | None, peer: str, role: Role, error: Exception | None,
               now: float) -> list[Action]:
        """The session ended early (``ReconLifecycle.failed``: its range given back, the peer
        backed off, a protocol fault charged)."""
        if plan is not None:
            self._exchanges.pop(plan.id, None)
        return self.sessions.failed(plan, peer, role, error, now)

    def declined(self, plan: SessionPlan) -> None:
        """The peer answered BUSY: the range goes back first in line; no backoff."""
        self._exchanges.pop(plan.id, None)
        self.sessions.declined(plan)

    def abandoned(self, plan: SessionPlan) -> None:
        """The session was cancelled on our side (shutdown)."""
        self._exchanges.pop(plan.id, None)
        self.sessions.abandoned(plan)

    def _exchange(self, plan: SessionPlan) -> ReconExchange:
        exchange = self._exchanges.get(plan.id)
        if exchange is None:
            raise LocalProtocolError(f"session {plan.id} with {plan.peer} is not open")
        return exchange

    def sessions_open(self) -> int:
        """Sessions begun and not yet ended (finished, failed, declined or abandoned)."""
        return len(self._exchanges)
