"""When an ``SdsChannel`` sends a sync message (spec, "periodic sync"): the periodic timer,
backed off from the channel's latest broadcast (anyone's), with a seeded jitter scaled by the
SDS-R response groups; and the linger (``SdsConfig.repair_linger``), which holds a due repair
request back a little so that requests falling due close together share one message. A layer
of the channel: it only keeps the two sync timers in the channel's shared queue and answers
whether a due one should send; the channel builds and sends the message.
"""

from __future__ import annotations

import random

from sync.sds.config import SdsConfig
from sync.sds.repair_buffers import RepairBuffers
from sync.sds.timers import TimerKind, TimerQueue

__all__ = ["REPAIR_SYNC_KEY", "SYNC_KEY", "SyncSchedule"]

#: The timer key of a channel's (one) periodic sync timer.
SYNC_KEY = ""
#: The timer of a sync carrying lingering repair requests (``SdsConfig.repair_linger``).
REPAIR_SYNC_KEY = "repair"


class SyncSchedule:
    def __init__(self, config: SdsConfig, timers: TimerQueue, repair: RepairBuffers,
                 rng: random.Random, now: float) -> None:
        self.config = config
        self._timers = timers
        self._repair = repair
        self._rng = rng
        #: The latest broadcast on the channel, ours or anyone's (the periodic sync backs off
        #: from it).
        self.last_activity = now
        #: When the periodic timer was last armed.
        self.armed_at = now

    def arm(self, base: float) -> None:
        """The next periodic sync: one interval (plus jitter) after ``base``."""
        self.armed_at = base
        cfg = self.config
        jitter = cfg.sync_jitter
        if cfg.sync_jitter_scaled and self._repair.auto_groups:
            jitter *= self._repair.response_groups(base)
        delay = cfg.sync_interval + self._rng.uniform(0.0, jitter)
        self._timers.schedule(TimerKind.SYNC, SYNC_KEY, base + delay)

    def periodic_due(self, now: float, *, has_log: bool) -> bool:
        """The periodic timer fired: send a sync now? (Otherwise it is re-armed.)"""
        if self.last_activity > self.armed_at:
            # Somebody broadcast since we armed: back off from that instead.
            self.arm(self.last_activity)
            return False
        if not has_log:
            # Nothing to say: no history, no filter content (due repairs have their own timer).
            self.arm(now)
            return False
        return True

    def linger(self, now: float) -> bool:
        """A request fell due: send it now (True), or (``repair_linger``) on whatever we send
        within the linger, so that requests falling due close together share one message."""
        linger = self.linger_s(now)
        if linger <= 0:
            return True
        self.arm_linger(now + linger)
        return False

    def linger_s(self, now: float) -> float:
        cfg = self.config
        # Longer in a larger group (G = N div 128 + 1), where a member has more entries
        # falling due to share a message; never beyond T_min, the spec's shortest wait.
        scale = self._repair.response_groups(now) if self._repair.auto_groups else 1
        return min(cfg.repair_linger * scale, cfg.t_min)

    def arm_linger(self, at: float) -> None:
        if self._timers.due(TimerKind.SYNC, REPAIR_SYNC_KEY) is None:
            self._timers.schedule(TimerKind.SYNC, REPAIR_SYNC_KEY, at)

    def restore_linger(self, now: float) -> None:
        """The linger's own timer is not in saved state: requests already due when we stopped
        keep the deadline they had (due + linger) instead of lingering again from the restart."""
        overdue = [when for when, _ in self._repair.requests.values() if when <= now]
        if overdue and (linger := self.linger_s(now)) > 0:
            self.arm_linger(max(now, min(overdue) + linger))

    @property
    def sync_at(self) -> float | None:
        """When the periodic sync is due (saved state)."""
        return self._timers.due(TimerKind.SYNC, SYNC_KEY)

    def restore(self, last_activity: float, sync_at: float | None) -> None:
        self.last_activity = last_activity
        if sync_at is not None:
            self.armed_at = last_activity
            self._timers.schedule(TimerKind.SYNC, SYNC_KEY, sync_at)
