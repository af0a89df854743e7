"""Local HTTP API: JSON on loopback, an OpenAPI 3.1 description, Prometheus metrics.

Routes are declared once in ``ROUTES`` tables with their OpenAPI summary and ``RouteDoc``, so the
description served at ``/openapi.json`` cannot drift from what is served. Access control, request
ids and the logging of failures live in ``node.api.guard``, wrapped around the app by the daemon.
The toolkit route tables build on (``ApiError``, ``ApiRoute``, bodies, follows) is
``node.httpkit``; its names are re-exported here for the route tables of this package.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from node.httpkit import (
    DEFAULT_FOLLOW_BUFFER,
    DEFAULT_MAX_BODY,
    ApiError,
    ApiRoute,
    Handler,
    Param,
    RouteDoc,
    arr,
    document,
    follow_rows,
    follow_stream,
    int_param,
    internal_error,
    obj,
    read_body,
    read_json,
)

if TYPE_CHECKING:
    from node.config.settings import ApiConfig
    from node.telemetry.metrics import Metrics

__all__ = [
    "ApiError", "ApiNode", "ApiRoute", "RouteDoc", "create_app", "follow_rows", "follow_stream",
    "int_param", "internal_error", "read_body", "read_json", "serve_api",
]


class ApiNode(Protocol):
    """What the app and its base routes read of the node (``node.runtime.NodeRuntime``)."""

    @property
    def metrics(self) -> Metrics: ...

    @property
    def version(self) -> str: ...

    async def status(self) -> dict[str, Any]: ...

    async def wait_synced(self, timeout_s: float) -> None: ...


# The longest ``wait_synced`` one request may ask for (a client that waits longer asks again).
MAX_WAIT_SYNCED_S = 3600


async def _status(node: ApiNode, request: Request) -> Response:
    wait = int_param(request, "wait_synced", 0, maximum=MAX_WAIT_SYNCED_S)
    if wait:
        await node.wait_synced(wait)
    return JSONResponse(await node.status())


async def _metrics(node: ApiNode, _request: Request) -> Response:
    return PlainTextResponse(node.metrics.render(), media_type="text/plain; version=0.0.4")


STATUS_SCHEMA = obj({
    "peer_id": {"type": "string"}, "version": {"type": "string"},
    "network_id": {"type": "integer"}, "database": {"type": "string"},
    "uptime_s": {"type": "number"}, "events": {"type": "integer"},
    "listen_addrs": arr({"type": "string"}), "api_url": {"type": "string"},
    "channels": arr({"type": "string"}),
    "database_bytes": {"type": ["integer", "null"],
                       "description": "Bytes on disk of the database (null: unknown)"},
    "snapshot_bytes": {"type": ["integer", "null"],
                       "description": "Bytes under the snapshot directory (null: none)"},
    "address_book": {"type": "integer", "description": "Peers in the address book"},
    "sync": obj({
        "state": {"enum": ["in_sync", "behind", "unknown"], "description":
                  "in_sync: a connected peer was reconciled with and none holds events this "
                  "node lacks; behind: some do; unknown: no peer connected or reconciled yet"},
        "text": {"type": "string", "description": "The state for people: \"in sync\", "
                 "\"behind ~N events, catching up at R/s\", \"unknown (why)\""},
        "behind": {"type": "integer", "description": "Events the connected peers hold that "
                   "this node lacks: the largest peer estimate"},
        "rate_per_s": {"type": ["number", "null"],
                       "description": "Events stored per second over the last 10 s"},
        "eta_s": {"type": ["number", "null"], "description": "behind / rate_per_s"},
        "peers": {"type": "object", "description": "Per reconciled connected peer: behind "
                  "(estimate now), measured (what its last Recon round found), "
                  "reconciled_ago_s, partial (the round covered a part of the key space)"},
    }),
})
_WAIT_SYNCED = Param("wait_synced", "query", {"type": "integer", "minimum": 0,
                                              "maximum": MAX_WAIT_SYNCED_S},
                     "Wait up to this many seconds for the node to be in sync with its peers "
                     "(sync.state in_sync) before answering; the answer says whether it is "
                     "(`syncnode status --wait-synced`)")

BASE_ROUTES: list[ApiRoute] = [
    ApiRoute("GET", "/v1/status", "Node identity, version, database, uptime, counts and sync "
             "status; ?wait_synced=S waits until it is in sync with its peers", _status,
             RouteDoc(params=(_WAIT_SYNCED,), response=STATUS_SCHEMA)),
    ApiRoute("GET", "/metrics", "Prometheus metrics (text exposition format 0.0.4)", _metrics,
             RouteDoc(media="text/plain")),
]


async def _no_route(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    what = "no such route" if status == 404 else f"{request.method} not allowed here"
    return JSONResponse({"error": f"{what}: {request.url.path} (see /openapi.json)"},
                        status_code=status, headers=getattr(exc, "headers", None))


def create_app(node: ApiNode, routes: list[ApiRoute],
               api_config: ApiConfig | None = None) -> Starlette:
    def wrap(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(node, request)
            except ApiError as exc:
                node.metrics.inc("api_errors_total", status=str(exc.status))
                return JSONResponse({"error": exc.message}, status_code=exc.status)

        return endpoint

    node.metrics.describe("api_errors_total", "counter",
                          "Requests a handler refused as invalid, by HTTP status")
    node.metrics.describe("api_follows_refused_total", "counter",
                          "Follow streams refused because api.max_follows were open")
    node.metrics.describe("api_idempotent_replays_total", "counter",
                          "Publishes answered from an earlier request with the same "
                          "Idempotency-Key (no second event)")
    node.metrics.describe("api_idempotency_keys_evicted_total", "counter",
                          "Idempotency-Keys forgotten before their TTL because more than "
                          "api.idempotency_max_keys were held (oldest first)")
    for name in ("api_follows_refused_total", "api_idempotent_replays_total",
                 "api_idempotency_keys_evicted_total"):
        node.metrics.inc(name, 0)
    all_routes = [*BASE_ROUTES, *routes]

    async def openapi(_request: Request) -> Response:
        return JSONResponse(described)

    described = document(
        [(r.method, r.path, r.summary, r.doc) for r in all_routes]
        + [("GET", "/openapi.json", "This OpenAPI 3.1 description",
            RouteDoc(response={"type": "object"}))],
        node.version,
    )
    starlette_routes = [Route(r.path, wrap(r.handler), methods=[r.method]) for r in all_routes]
    starlette_routes.append(Route("/openapi.json", openapi, methods=["GET"]))
    app = Starlette(routes=starlette_routes, exception_handlers={
        Exception: internal_error, 404: _no_route, 405: _no_route})
    app.state.max_body_bytes = api_config.max_body_bytes if api_config else DEFAULT_MAX_BODY
    app.state.body_timeout_s = api_config.body_timeout_s if api_config else 30.0
    app.state.page_max_bytes = api_config.page_max_bytes if api_config else 8 * 1024 * 1024
    app.state.max_follows = api_config.max_follows if api_config else 64
    app.state.follow_buffer_bytes = (api_config.follow_buffer_bytes if api_config
                                     else DEFAULT_FOLLOW_BUFFER)
    app.state.follows = 0
    return app


async def serve_api(
    app: Any,
    host: str,
    port: int,
    shutdown: trio.Event,
    api_config: ApiConfig | None = None,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until ``shutdown`` is set; reports the bound base URL through ``task_status``."""
    config = HypercornConfig()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 2
    if api_config is not None:
        # Hypercorn's idle timer runs while no request is in progress: before the first one,
        # while its headers trickle in, between requests. (Its read_timeout is not used: it
        # would also cut a follow stream whose client has nothing to send.) Bodies have their
        # own deadline in read_body.
        config.keep_alive_timeout = api_config.idle_timeout_s

    async def relay(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await hypercorn_serve(
            app,
            config,
            shutdown_trigger=shutdown.wait,
            task_status=task_status,
        )

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(relay)
        task_status.started(binds[0].rstrip("/"))
