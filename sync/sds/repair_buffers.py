"""SDS-R state of one participant: the outgoing and incoming repair request buffers, the cache
of full messages it may be asked to rebroadcast, and the estimate of the channel's members that
sizes the response groups. A layer of an ``SdsChannel``."""

from __future__ import annotations

import heapq
from collections import OrderedDict

from sync.sds.config import SdsConfig
from sync.sds.members import MemberEstimate, response_groups
from sync.sds.message import HistoryRef
from sync.sds.repair import RepairHash, in_response_group, repair_hash, t_req, t_resp
from sync.sds.repair_budget import RepairBudget
from sync.sds.timers import TimerKind, TimerQueue

__all__ = ["REPAIR_PACING", "RepairBuffers"]

#: Spacing of due repair requests beyond the per-message quota.
REPAIR_PACING = 1.0


class RepairBuffers:
    """Deadlines live in the channel's shared :class:`TimerQueue`."""

    def __init__(self, participant_id: str, config: SdsConfig, timers: TimerQueue,
                 hash_fn: RepairHash = repair_hash) -> None:
        self.participant_id = participant_id
        self._hash = hash_fn
        self.config = config
        self._timers = timers
        #: Outgoing repair request buffer: missing id -> (T_req, entry).
        self.requests: dict[str, tuple[float, HistoryRef]] = {}
        #: Incoming repair request buffer: requested id -> T_resp.
        self.responses: dict[str, float] = {}
        #: Response groups G: fixed by the config, or (``num_response_groups`` 0) set by the
        #: channel from its member estimate; then every message is cached, since G changes.
        self.auto_groups = config.num_response_groups == 0
        self.groups = max(1, config.num_response_groups)
        self.budget = RepairBudget(config)
        #: id -> (sender, canonical wire) of messages whose response group we are in.
        self.cache: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        #: Bytes of wires in ``cache`` (bounded by ``repair_cache_bytes``).
        self.cache_bytes = 0
        #: How many members the channel has (response groups, ``sync.sds.members``); the
        #: node may set ``members.external``, its own estimate (say, its topic's subscribers).
        self.members = MemberEstimate(config.member_window, config.max_members_tracked)

    def response_groups(self, now: float) -> int:
        """SDS-R response groups G now: the config's, or ``members div 128 + 1``."""
        if self.auto_groups:
            self.groups = response_groups(self.members.count(now),
                                          self.config.response_group_size)
        return self.groups

    @property
    def request_ids(self) -> frozenset[str]:
        return frozenset(self.requests)

    @property
    def response_ids(self) -> frozenset[str]:
        return frozenset(self.responses)

    @property
    def refusals(self) -> dict[str, int]:
        """Repair answers refused so far, by bound: requester, cooldown, total."""
        return dict(self.budget.refused)

    def remember(self, mid: str, sender: str, wire: bytes) -> None:
        """Cache a delivered message if we may have to answer for it."""
        cfg = self.config
        if cfg.repair_cache_size <= 0:
            return
        groups = self.groups
        if (not self.auto_groups and groups != 1
                and not in_response_group(self.participant_id, sender, mid, groups, self._hash)):
            return
        size = len(wire)
        if size > cfg.repair_cache_bytes:
            return
        cache = self.cache
        cached = cache.pop(mid, None)  # (``forget``, inlined: every delivery comes here)
        if cached is not None:
            self.cache_bytes -= len(cached[1])
        cache[mid] = (sender, wire)
        self.cache_bytes += size
        while len(cache) > cfg.repair_cache_size or self.cache_bytes > cfg.repair_cache_bytes:
            _, (_, old) = cache.popitem(last=False)
            self.cache_bytes -= len(old)

    def forget(self, mid: str) -> None:
        """Drop a cached message (its delivery was undone)."""
        cached = self.cache.pop(mid, None)
        if cached is not None:
            self.cache_bytes -= len(cached[1])

    def want(self, ref: HistoryRef, now: float, *, at: float | None = None) -> None:
        """(Re-)arm a request for a missing message, after a T_req back-off by default."""
        cfg = self.config
        when = (
            at
            if at is not None
            else t_req(now, self.participant_id, ref.message_id, cfg.t_min, cfg.t_max, self._hash)
        )
        self.requests[ref.message_id] = (when, ref)
        self._timers.schedule(TimerKind.REPAIR_REQUEST, ref.message_id, when)

    def seen(self, mid: str) -> None:
        """A copy of ``mid`` arrived: neither ask for it nor answer for it any more."""
        if self.requests.pop(mid, None) is not None:
            self._timers.cancel(TimerKind.REPAIR_REQUEST, mid)
        if self.responses.pop(mid, None) is not None:
            self._timers.cancel(TimerKind.REPAIR_RESPONSE, mid)

    def take_due(self, now: float) -> tuple[HistoryRef, ...]:
        """Up to the quota of due requests, lowest T_req first, for a message we are sending.
        Each is re-armed so that it is asked for again if the repair does not come."""
        quota = self.config.max_repair_requests
        if not self.requests or quota <= 0:
            return ()
        due = [(when, mid) for mid, (when, _) in self.requests.items() if when <= now]
        if not due:
            return ()
        chosen = tuple(self.requests[mid][1] for _, mid in heapq.nsmallest(quota, due))
        for ref in chosen:
            self.want(ref, now)
        return chosen

    def has_due(self, now: float) -> bool:
        return any(when <= now for when, _ in self.requests.values())

    def pace_due(self, now: float) -> None:
        """Move due requests left over after a message to one pacing step later."""
        for when, ref in list(self.requests.values()):
            if when <= now:
                self.want(ref, now, at=now + REPAIR_PACING)

    def on_requests(self, refs: tuple[HistoryRef, ...], now: float,
                    requester: str) -> list[str]:
        """``requester`` asked for ``refs``: back off our own requests, schedule our answers
        within the budgets. Returns the ids refused because ``requester`` is over its budget."""
        cfg, budget = self.config, self.budget
        refused: list[str] = []
        for ref in refs:
            mid = ref.message_id
            if mid in self.requests:
                self.want(self.requests[mid][1], now)
            cached = self.cache.get(mid)
            if cached is None or mid in self.responses:
                continue
            sender, wire = cached
            if not in_response_group(self.participant_id, sender, mid, self.groups,
                                     self._hash):
                continue
            if budget.cooling(mid, now):
                continue
            if not budget.admit(requester, len(wire), now):
                refused.append(mid)
                continue
            when = t_resp(now, self.participant_id, sender, mid, cfg.t_max, self._hash)
            self.responses[mid] = when
            self._timers.schedule(TimerKind.REPAIR_RESPONSE, mid, when)
        return refused

    def restore_response(self, mid: str, when: float) -> None:
        """An answer from saved state, due at ``when``."""
        self.responses[mid] = when
        self._timers.schedule(TimerKind.REPAIR_RESPONSE, mid, when)

    def respond(self, mid: str, now: float) -> bytes | None:
        """The wire to rebroadcast for a due response, if it is still wanted, cached and
        within the channel's repair budget."""
        if self.responses.pop(mid, None) is None:
            return None
        cached = self.cache.get(mid)
        if cached is None or not self.budget.spend(mid, len(cached[1]), now):
            return None
        return cached[1]
