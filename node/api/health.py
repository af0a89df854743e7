"""``GET /healthz`` and ``GET /readyz``: the probes of systemd watchdogs, load balancers and
Kubernetes. Both answer without the API token while the API is on loopback (``OPEN_PATHS``).

* ``/healthz``: the process is up and its event loop answers. Restart the node when it fails.
* ``/readyz``: the node can do its job: the database answers a query, and when bootstrap peers
  are configured at least one peer is connected (a node cut off from its group is alive but
  serves a stale log). 503 with the failing check otherwise: route traffic elsewhere, wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import trio
from sqlalchemy import Connection, text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from node.httpkit import ApiRoute
from node.httpkit.openapi import RouteDoc, obj

if TYPE_CHECKING:
    from node.config.settings import Config
    from node.p2p import P2PHost
    from node.store.events import EventStore

__all__ = ["HEALTH_ROUTES", "HealthNode"]


class HealthNode(Protocol):
    """What the probes read of the node (``node.runtime.NodeRuntime``)."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> EventStore: ...

    @property
    def host(self) -> P2PHost | None: ...

    def uptime_s(self) -> float: ...


DB_CHECK_TIMEOUT_S = 5.0


async def _healthz(node: HealthNode, _request: Request) -> Response:
    return JSONResponse({"status": "ok", "uptime_s": round(node.uptime_s(), 3)})


def _select_one(conn: Connection) -> Any:
    return conn.execute(text("SELECT 1")).scalar()


async def _database_check(node: HealthNode) -> str | None:
    try:
        with trio.fail_after(DB_CHECK_TIMEOUT_S):
            await node.store.read(_select_one)
    except trio.TooSlowError:
        return f"database did not answer within {DB_CHECK_TIMEOUT_S} s"
    except Exception as exc:  # any driver error means "not ready", with its reason
        return f"database error: {exc.__class__.__name__}: {str(exc).splitlines()[0][:200]}"
    return None


async def _readyz(node: HealthNode, _request: Request) -> Response:
    checks: dict[str, Any] = {}
    problems: list[str] = []
    db_problem = await _database_check(node)
    checks["database"] = db_problem or "ok"
    if db_problem:
        problems.append(db_problem)
    peers = len(node.host.connected_peers()) if node.host is not None else 0
    checks["peers"] = peers
    if node.config.p2p.bootstrap and peers == 0:
        problems.append("no peer connected (p2p.bootstrap is set: this node is cut off)")
    body = {"ready": not problems, "checks": checks}
    if problems:
        body["error"] = "; ".join(problems)
        return JSONResponse(body, status_code=503)
    return JSONResponse(body)


_READY = obj({"ready": {"type": "boolean"}, "checks": {"type": "object"}},
             {"error": {"type": "string"}})

HEALTH_ROUTES: list[ApiRoute] = [
    ApiRoute("GET", "/healthz", "Liveness: the process is up and answers", _healthz,
             RouteDoc(open=True, response=obj({"status": {"type": "string"},
                                                "uptime_s": {"type": "number"}}))),
    ApiRoute("GET", "/readyz", "Readiness: database answers; a peer is connected when "
             "bootstrap peers are configured (503 otherwise)", _readyz,
             RouteDoc(open=True, response=_READY, errors={503: "not ready (JSON says why)"})),
]
