"""Local HTTP API: JSON on 127.0.0.1, an OpenAPI description, Prometheus metrics.

Routes are declared once in ``ROUTES`` with their OpenAPI summary, so the description served at
``/openapi.json`` cannot drift from what is served.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from node.runtime import NodeRuntime

__all__ = ["ApiError", "ApiRoute", "create_app", "serve_api"]

Handler = Callable[["NodeRuntime", Request], Awaitable[Response]]


class ApiError(Exception):
    """Raised by a handler to answer with a JSON error body."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class ApiRoute:
    method: str
    path: str
    summary: str
    handler: Handler


async def _status(node: NodeRuntime, _request: Request) -> Response:
    return JSONResponse(await node.status())


async def _metrics(node: NodeRuntime, _request: Request) -> Response:
    return PlainTextResponse(node.metrics.render(), media_type="text/plain; version=0.0.4")


BASE_ROUTES: list[ApiRoute] = [
    ApiRoute("GET", "/v1/status", "Node identity, version, database, uptime and counts", _status),
    ApiRoute("GET", "/metrics", "Prometheus metrics", _metrics),
]


def openapi_document(routes: list[ApiRoute], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = {
            "summary": route.summary,
            "responses": {"200": {"description": "OK"}, "4XX": {"description": "Error (JSON)"}},
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "syncnode local API", "version": version},
        "paths": paths,
    }


async def read_json(request: Request, max_bytes: int = 4 * 1024 * 1024) -> Any:
    body = await request.body()
    if len(body) > max_bytes:
        raise ApiError(413, f"request body over {max_bytes} bytes")
    try:
        return json.loads(body or b"null")
    except ValueError:
        raise ApiError(400, "request body is not valid JSON") from None


def create_app(node: NodeRuntime, routes: list[ApiRoute]) -> Starlette:
    def wrap(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(node, request)
            except ApiError as exc:
                node.metrics.inc("api_errors_total", status=str(exc.status))
                return JSONResponse({"error": exc.message}, status_code=exc.status)

        return endpoint

    all_routes = [*BASE_ROUTES, *routes]
    document = openapi_document(all_routes, node.version)

    async def openapi(_request: Request) -> Response:
        return JSONResponse(document)

    starlette_routes = [Route(r.path, wrap(r.handler), methods=[r.method]) for r in all_routes]
    starlette_routes.append(Route("/openapi.json", openapi, methods=["GET"]))
    return Starlette(routes=starlette_routes)


async def serve_api(
    app: Starlette,
    host: str,
    port: int,
    shutdown: trio.Event,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until ``shutdown`` is set; reports the bound base URL through ``task_status``."""
    config = HypercornConfig()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 2

    async def relay(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await hypercorn_serve(
            app,  # type: ignore[arg-type]  # Starlette's ASGI signature is looser than Hypercorn's
            config,
            shutdown_trigger=shutdown.wait,
            task_status=task_status,
        )

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(relay)
        task_status.started(binds[0].rstrip("/"))
