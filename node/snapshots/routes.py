"""API routes of the snapshot scheduler: trigger a rebuild, read its progress and last result.

The handlers reach the scheduler as ``node.snapshots`` (a ``node.snapshots.SnapshotScheduler``
set by the daemon); a node without one answers 503.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from node.httpkit import ApiError, ApiRoute, RouteDoc

if TYPE_CHECKING:
    from node.snapshots.scheduler import SnapshotScheduler

__all__ = ["SNAPSHOT_ROUTES", "SnapshotsNode"]


class SnapshotsNode(Protocol):
    """What these routes read of the node (``node.runtime.NodeRuntime``)."""

    @property
    def snapshots(self) -> SnapshotScheduler | None: ...


def _scheduler(node: SnapshotsNode) -> SnapshotScheduler:
    if node.snapshots is None:
        raise ApiError(503, "snapshots are not enabled on this node (config [spark])")
    return node.snapshots


async def _trigger(node: SnapshotsNode, _request: Request) -> Response:
    return JSONResponse(_scheduler(node).trigger("api"), status_code=202)


async def _status(node: SnapshotsNode, _request: Request) -> Response:
    return JSONResponse(_scheduler(node).status())


_NOT_ENABLED = {503: "Snapshots are not enabled on this node (config [spark])"}

SNAPSHOT_ROUTES: list[ApiRoute] = [
    ApiRoute("POST", "/v1/snapshots", "Start a snapshot rebuild (queued if one is running)",
             _trigger, RouteDoc(status=202, response={"type": "object"}, errors=_NOT_ENABLED)),
    ApiRoute("GET", "/v1/snapshots/status",
             "Snapshot job state, progress of the running job and the last result", _status,
             RouteDoc(response={"type": "object"}, errors=_NOT_ENABLED)),
]
