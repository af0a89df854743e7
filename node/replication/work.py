"""Charging peers for the work they ask of us: the :mod:`sync.workbudget` core on trio's clock.

``WorkGate.charge(peer, kind, units)`` is awaited before a Recon message is answered, a fetch
request served or a want list read from the database: it returns at once within budget, sleeps
while the peer (or all peers together) is over its rate, and raises :class:`OverBudget` when the
wait would exceed ``peers.work_max_wait_s``: the caller ends that stream, the refusal is counted
(``work_refused_total``) and, when the peer's own budget is the reason, costs it standing
(penalty ``over_budget``). A Recon stream's frames are charged through a
:class:`FrameCharges` (an advance at the peer's price before the frame is read, the rest once
it is decoded). docs/security.md "Work budgets".
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import trio

from node.config.settings import PeersSection
from node.p2p.standing import PeerStanding
from node.replication.clock import Clock
from node.telemetry.metrics import Metrics
from sync.workbudget import Decision, Refuse, Wait, WorkBudget, WorkLimits

__all__ = ["FrameCharges", "OverBudget", "WorkGate", "work_limits"]


class OverBudget(Exception):
    """The peer's request was refused: its (or the node's) work budget is spent."""

    def __init__(self, peer: str, kind: str, scope: str) -> None:
        super().__init__(f"{kind} work refused: {scope} budget spent")
        self.peer, self.kind, self.scope = peer, kind, scope


def work_limits(section: PeersSection) -> WorkLimits:
    return WorkLimits(peer_rate=section.work_rate, peer_burst=section.work_burst,
                      total_rate=section.work_total_rate, total_burst=section.work_total_burst,
                      max_wait_s=section.work_max_wait_s, max_peers=section.max_tracked)


class WorkGate:
    def __init__(self, limits: WorkLimits, metrics: Metrics,
                 standing: PeerStanding | None, clock: Clock) -> None:
        self.clock = clock
        self.budget = WorkBudget(limits, self.clock.now())
        self.metrics = metrics
        self.standing = standing
        for name, text in (
            ("work_units_total", "Work units granted to peers' requests, by kind"),
            ("work_deferred_total", "Peer requests slowed to the peer's (or the total) work rate"),
            ("work_refused_total", "Peer requests refused: a work budget spent for longer than "
                                   "peers.work_max_wait_s (scope peer: penalised)"),
        ):
            metrics.describe(name, "counter", text)
            metrics.inc(name, 0)
        metrics.gauge_fn("work_budgets_tracked", lambda: float(len(self.budget)),
                         "Peers whose work budget is remembered")

    def charger(self, peer: str, kind: str) -> Callable[[int], Awaitable[None]]:
        """``charge`` bound to one peer and kind (what a protocol driver is handed)."""
        return functools.partial(self.charge, peer, kind)

    def frames(self, peer: str, kind: str) -> FrameCharges:
        """The charges for one stream's Recon frames from ``peer``."""
        return FrameCharges(self, peer, kind)

    async def charge(self, peer: str, kind: str, units: int, spent: bool = False) -> None:
        """Wait until ``units`` of work for ``peer`` may be done, or raise ``OverBudget``
        (``spent``: part of it is done, and paid for even when the rest is refused)."""
        await self.carry_out(peer, kind, self.budget.charge(peer, units, self.clock.now(), spent))

    async def carry_out(self, peer: str, kind: str, decision: Decision) -> None:
        """Count ``decision``, then refuse (``OverBudget``, perhaps penalised), wait or go on."""
        if isinstance(decision, Refuse):
            self.metrics.inc("work_refused_total", kind=kind, scope=decision.scope)
            if decision.penalty is not None and self.standing is not None:
                self.standing.penalise(peer, decision.penalty)
            raise OverBudget(peer, kind, decision.scope)
        self.metrics.inc("work_units_total", decision.units, kind=kind)
        if isinstance(decision, Wait):
            self.metrics.inc("work_deferred_total", kind=kind)
            await trio.sleep_until(decision.until)


class FrameCharges:
    """One Recon stream's frames charged to its peer: ``before(nbytes)`` when a frame's length
    prefix has been read, ``after(units)`` once it is decoded and asks ``units`` of work
    (``sync.workbudget.WorkBudget.charge_frame`` and ``settle_frame``). Either may wait or
    raise :class:`OverBudget`."""

    def __init__(self, gate: WorkGate, peer: str, kind: str) -> None:
        self.gate, self.peer, self.kind = gate, peer, kind
        self._nbytes = self._paid = 0

    async def before(self, nbytes: int) -> None:
        decision = self.gate.budget.charge_frame(self.peer, nbytes, self.gate.clock.now())
        self._nbytes, self._paid = nbytes, decision.units
        await self.gate.carry_out(self.peer, self.kind, decision)

    async def after(self, units: int) -> None:
        budget, now = self.gate.budget, self.gate.clock.now()
        await self.gate.carry_out(self.peer, self.kind, budget.settle_frame(
            self.peer, self._nbytes, units, self._paid, now))
