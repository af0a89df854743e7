"""How far behind its peers the node is, sans-IO: "in sync", or "behind ~N events, catching
up at R/s", per peer and in total, from what Recon already learns.

Every reconciliation ends knowing exactly how many keys the peer holds that we lack (the
keys it found missing, those kept and those dropped beyond ``recon.max_missing_keys``). That
count is the peer's estimate as of the round; afterwards every event the node stores (by
Recon, gossip or repair) takes one off it, and the next round with that peer measures it
afresh. So the estimate errs only between rounds, and in one direction each way: events
stored that the peer did not have make it too low, events the peer gained make it too high.

* A round over a part of the key space (a backlog range after a truncated session) measures
  only that part: it can raise the estimate, never lower it.
* The total is the largest peer estimate: the events the peers hold that we lack are at least
  that many, and they overlap (the sum would count an event every peer has once per peer).
* In sync: at least one connected peer has been reconciled with, and no reconciled connected
  peer holds events we lack. Peers not reconciled with yet are listed as unknown and do not
  count either way (a peer we never reconcile with, e.g. one outside our interests, cannot
  hold the status back forever).
* The rate is what the node stored per second over the last ``rate_window_s``.

``now`` is the driver's monotonic clock, in seconds.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["BEHIND", "IN_SYNC", "UNKNOWN", "PeerSync", "SyncEstimator", "SyncView"]

IN_SYNC, BEHIND, UNKNOWN = "in_sync", "behind", "unknown"


@dataclass(frozen=True)
class PeerSync:
    """One peer as of its last round: ``behind`` is the estimate now, ``measured`` what the
    round found, ``at`` when (``now``)."""

    behind: int
    measured: int
    at: float
    partial: bool


@dataclass(frozen=True)
class SyncView:
    state: str  # IN_SYNC, BEHIND or UNKNOWN
    behind: int
    #: Events stored per second lately (None: nothing measured yet).
    rate_per_s: float | None
    #: ``behind / rate`` while behind and storing, else None.
    eta_s: float | None
    #: Connected peers reconciled with; connected peers not in it are unknown.
    peers: dict[str, PeerSync]
    #: Why the state is UNKNOWN ("" otherwise).
    reason: str = ""

    def describe(self) -> str:
        """``in sync``, ``behind ~N events, catching up at R/s`` or ``unknown (why)``."""
        if self.state == IN_SYNC:
            return "in sync"
        if self.state == UNKNOWN:
            return f"unknown ({self.reason})"
        text = f"behind ~{self.behind} events"
        if self.rate_per_s:
            text += f", catching up at {self.rate_per_s:.0f}/s"
        return text


@dataclass
class _Round:
    measured: int
    stored_before: int  # the store counter when it was measured
    at: float
    partial: bool

    def behind(self, stored: int) -> int:
        return max(0, self.measured - (stored - self.stored_before))


class SyncEstimator:
    def __init__(self, *, started: float, rate_window_s: float = 10.0,
                 max_peers: int = 4096) -> None:
        if rate_window_s < 1:
            raise ValueError("rate_window_s must be >= 1")
        self.started = started
        self.rate_window_s = rate_window_s
        self.max_peers = max_peers
        self._rounds: OrderedDict[str, _Round] = OrderedDict()
        self._stored = 0
        # (whole second, events stored in it), oldest first, within the rate window.
        self._per_second: deque[tuple[int, int]] = deque()

    def reconciled(self, peer: str, missing: int, now: float, *, partial: bool = False) -> None:
        """A round with ``peer`` found it holds ``missing`` keys we lack (``partial``: over a
        part of the key space only)."""
        last = self._rounds.pop(peer, None)
        if partial and last is not None:
            missing = max(missing, last.behind(self._stored))
        self._rounds[peer] = _Round(max(missing, 0), self._stored, now, partial)
        while len(self._rounds) > self.max_peers:  # the longest unreconciled go first
            self._rounds.popitem(last=False)

    def stored(self, count: int, now: float) -> None:
        """The node stored ``count`` new events."""
        if count <= 0:
            return
        self._stored += count
        second = int(now)
        if self._per_second and self._per_second[-1][0] == second:
            self._per_second[-1] = (second, self._per_second[-1][1] + count)
        else:
            self._per_second.append((second, count))
        self._trim(now)

    def _trim(self, now: float) -> None:
        # Whole seconds: the window reaches back up to one second further.
        while self._per_second and self._per_second[0][0] <= now - self.rate_window_s - 1:
            self._per_second.popleft()

    def rate(self, now: float) -> float | None:
        """Events stored per second over the last ``rate_window_s`` (or since start)."""
        self._trim(now)
        span = min(self.rate_window_s, now - self.started)
        if span <= 0:
            return None
        return sum(n for _, n in self._per_second) / max(span, 1.0)

    def view(self, now: float, connected: Collection[str]) -> SyncView:
        peers = {
            peer: PeerSync(r.behind(self._stored), r.measured, r.at, r.partial)
            for peer, r in self._rounds.items() if peer in connected
        }
        rate = self.rate(now)
        if not connected:
            return SyncView(UNKNOWN, 0, rate, None, {}, "no peer connected")
        if not peers:
            return SyncView(UNKNOWN, 0, rate, None, {}, "no Recon round with a connected peer "
                                                        "yet")
        behind = max(p.behind for p in peers.values())
        if behind == 0:
            return SyncView(IN_SYNC, 0, rate, None, peers)
        eta = behind / rate if rate else None
        return SyncView(BEHIND, behind, rate, eta, peers)
