"""The node's sync status: the sans-IO ``sync.syncstatus.SyncEstimator``, fed what each Recon
round learned (``ReconSessions._reconcile``) and every commit of new events, read by
``/v1/status`` (and its ``wait_synced`` long poll), ``/v1/peers``, the status page and
``syncnode status``; the total is also the ``sync_behind_events`` gauge."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import trio

from node.clock import Clock
from node.telemetry.metrics import Metrics
from storage import AppendResult
from sync.syncstatus import IN_SYNC, PeerSync, SyncEstimator, SyncView

__all__ = ["SyncStatus"]

# How often a waiting request looks again (the status changes with rounds and commits).
WAIT_POLL_S = 0.2


class SyncStatus:
    def __init__(self, metrics: Metrics, clock: Clock,
                 connected: Callable[[], Collection[str]]) -> None:
        self.clock = clock
        self.connected = connected
        self.core = SyncEstimator(started=clock.now())
        metrics.gauge_fn("sync_behind_events", lambda: float(self.view().behind),
                         "Events the node's connected peers hold that it lacks (estimated "
                         "from the last Recon round with each: the largest peer estimate)")

    def stored(self, result: AppendResult) -> None:
        """A commit (``ReconService.committed``): what it stored counts toward the rate."""
        self.core.stored(len(result.inserted), self.clock.now())

    def reconciled(self, peer: str, missing: int, *, partial: bool) -> None:
        """A Recon round with ``peer`` found it holds ``missing`` keys we lack."""
        self.core.reconciled(peer, missing, self.clock.now(), partial=partial)

    def view(self) -> SyncView:
        return self.core.view(self.clock.now(), set(self.connected()))

    async def wait_synced(self, timeout_s: float) -> SyncView:
        """The view once the node is in sync, or as it is after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            while (view := self.view()).state != IN_SYNC:
                await trio.sleep(WAIT_POLL_S)
            return view
        return self.view()

    def describe(self) -> dict[str, Any]:
        """The ``sync`` object of ``/v1/status``."""
        view = self.view()
        now = self.clock.now()
        return {
            "state": view.state,
            "text": view.describe(),
            "behind": view.behind,
            "rate_per_s": None if view.rate_per_s is None else round(view.rate_per_s, 1),
            "eta_s": None if view.eta_s is None else round(view.eta_s, 1),
            "peers": {peer: peer_json(p, now) for peer, p in view.peers.items()},
        }

    def peers(self) -> dict[str, dict[str, Any]]:
        """Each reconciled connected peer's ``sync`` in ``/v1/peers`` (a connected peer not
        in it is not reconciled with yet)."""
        now = self.clock.now()
        return {peer: peer_json(p, now) for peer, p in self.view().peers.items()}


def peer_json(peer: PeerSync, now: float) -> dict[str, Any]:
    return {"behind": peer.behind, "measured": peer.measured,
            "reconciled_ago_s": round(max(now - peer.at, 0.0), 1), "partial": peer.partial}
