"""What SDS-R answers may cost us (docs/security.md "SDS-R repairs").

A repair answer rebroadcasts a whole cached message to the group, while a request names it in
a few bytes: unbounded, requests are an amplifier. Three bounds, all over ``repair_window``:

* per message: we rebroadcast one message at most once per ``repair_cooldown`` (capped at
  ``t_min``, the soonest an honest member asks again); a request for a message in its cooldown
  is neither scheduled nor charged.
* per requester: the answers its requests schedule may add up to ``repair_requester_bytes``
  of wires. A request beyond that is refused and reported (``RepairRefused``, for the node to
  penalise: an honest member asks for what it missed, up to three ids per message it sends,
  and misses more only after an outage that Recon repairs). Requests are signed by their
  requester and bound to a fresh message (``SdsChannel`` ignores them on a message older than
  ``t_min``), so a replay cannot bill an honest member: within ``t_min`` the answer's
  cooldown absorbs it, after that it is stale.
* per channel: all answers together at most ``repair_total_bytes``.

Memory is bounded too: ``max_repair_requesters`` requesters (the least recent dropped), and
one entry per message in cooldown.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from sync.sds.config import SdsConfig

__all__ = ["RepairBudget"]


@dataclass
class _Bill:
    since: float
    spent: int = 0


class RepairBudget:
    def __init__(self, config: SdsConfig) -> None:
        self.config = config
        self._bills: OrderedDict[str, _Bill] = OrderedDict()
        #: id -> when we last rebroadcast it, oldest first.
        self._answered: OrderedDict[str, float] = OrderedDict()
        self._total = _Bill(0.0)
        #: Refusals by reason, for metrics.
        self.refused: dict[str, int] = {"requester": 0, "cooldown": 0, "total": 0}

    def _bill(self, requester: str, now: float) -> _Bill:
        bills = self._bills
        bill = bills.get(requester)
        if bill is None or now - bill.since >= self.config.repair_window:
            bill = _Bill(now)
            bills.pop(requester, None)
            while len(bills) >= self.config.max_repair_requesters:
                bills.popitem(last=False)
            bills[requester] = bill
        else:
            bills.move_to_end(requester)
        return bill

    def admit(self, requester: str, size: int, now: float) -> bool:
        """May ``requester``'s request for a wire of ``size`` bytes be scheduled (and charged
        to it)? False: it is over its budget (refused; the caller reports it)."""
        bill = self._bill(requester, now)
        if bill.spent + size > self.config.repair_requester_bytes:
            self.refused["requester"] += 1
            return False
        bill.spent += size
        return True

    def cooling(self, mid: str, now: float) -> bool:
        """Whether we rebroadcast ``mid`` less than ``repair_cooldown`` ago (counted)."""
        answered = self._answered
        horizon = now - min(self.config.repair_cooldown, self.config.t_min)
        while answered:
            first = next(iter(answered))
            if answered[first] > horizon:
                break
            del answered[first]
        if mid in answered:
            self.refused["cooldown"] += 1
            return True
        return False

    def spend(self, mid: str, size: int, now: float) -> bool:
        """Account for rebroadcasting ``mid`` now; False (counted) when the channel's total
        budget for the window is spent."""
        total = self._total
        if now - total.since >= self.config.repair_window:
            total.since, total.spent = now, 0
        if total.spent + size > self.config.repair_total_bytes:
            self.refused["total"] += 1
            return False
        total.spent += size
        answered = self._answered
        answered.pop(mid, None)
        answered[mid] = now
        if len(answered) > self.config.repair_cache_size:
            answered.popitem(last=False)
        return True
