"""Local HTTP API: JSON on loopback, an OpenAPI 3.1 description, Prometheus metrics.

Routes are declared once in ``ROUTES`` tables with their OpenAPI summary and ``RouteDoc``, so the
description served at ``/openapi.json`` cannot drift from what is served. Access control, request
ids and the logging of failures live in ``node.api.guard``, wrapped around the app by the daemon.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from node.api.openapi import INT64_MAX, RouteDoc, arr, document, obj

if TYPE_CHECKING:
    from node.config import ApiConfig
    from node.runtime import NodeRuntime

__all__ = [
    "ApiError", "ApiRoute", "RouteDoc", "create_app", "follow_rows", "follow_stream",
    "int_param",
    "internal_error", "read_body",
    "read_json",
    "serve_api",
]

Handler = Callable[["NodeRuntime", Request], Awaitable[Response]]

DEFAULT_MAX_BODY = 4 * 1024 * 1024
DEFAULT_FOLLOW_BUFFER = 256 * 1024
MAX_JSON_DEPTH = 64
# A follow with nothing new looks again this often even if no commit signal came (a signal
# can be missed between a read and the wait).
FOLLOW_POLL_S = 1.0

Row = TypeVar("Row")


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
    doc: RouteDoc = field(default_factory=RouteDoc)


async def _status(node: NodeRuntime, _request: Request) -> Response:
    return JSONResponse(await node.status())


async def _metrics(node: NodeRuntime, _request: Request) -> Response:
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
})

BASE_ROUTES: list[ApiRoute] = [
    ApiRoute("GET", "/v1/status", "Node identity, version, database, uptime and counts", _status,
             RouteDoc(response=STATUS_SCHEMA)),
    ApiRoute("GET", "/metrics", "Prometheus metrics (text exposition format 0.0.4)", _metrics,
             RouteDoc(media="text/plain")),
]


async def read_body(request: Request, max_bytes: int | None = None) -> bytes:
    """The body, counted as it streams in: refused (413) at ``max_bytes``, never read whole first,
    and abandoned (408) if it does not arrive within ``api.body_timeout_s``."""
    state = request.app.state
    limit = max_bytes if max_bytes is not None else getattr(state, "max_body_bytes",
                                                            DEFAULT_MAX_BODY)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    with trio.move_on_after(getattr(state, "body_timeout_s", 30.0)) as scope:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"request body over {limit} bytes")
                chunks.append(chunk)
        except ClientDisconnect:
            raise ApiError(400, "client went away before the body was complete") from None
    if scope.cancelled_caught:
        raise ApiError(408, "request body not received in time")
    return b"".join(chunks)


def int_param(request: Request, name: str, default: int, maximum: int = INT64_MAX,
              minimum: int = 0) -> int:
    """An integer query parameter in ``minimum..maximum``; anything else (``1e20``, ``-1``,
    ``2**63``) is a 400 naming the parameter, never an overflow further down."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19 or not (
        minimum <= int(raw) <= maximum
    ):
        raise ApiError(400, f"query parameter {name} must be an integer in {minimum}..{maximum}")
    return int(raw)


def _check_json(value: Any) -> None:
    """Refuse what JSON allows but nothing downstream can use: lone UTF-16 surrogates (they
    cannot be encoded as UTF-8) and nesting deeper than any route needs."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ApiError(400, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ApiError(400, "JSON string holds a lone surrogate (\\ud800-\\udfff); "
                                    "send valid Unicode") from None
        elif isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


async def read_json(request: Request, max_bytes: int | None = None) -> Any:
    body = await read_body(request, max_bytes)
    try:
        value = json.loads(body or b"null")
    except RecursionError:
        raise ApiError(400, f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        raise ApiError(400, "request body is not valid JSON") from None
    _check_json(value)
    return value


class _CountedStream(StreamingResponse):
    """An NDJSON stream that gives its follow slot back however it ends."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        super().__init__(content, media_type="application/x-ndjson")
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def follow_stream(node: NodeRuntime, request: Request,
                  lines: AsyncIterator[bytes]) -> StreamingResponse:
    """``lines`` as an NDJSON response taking one of the ``api.max_follows`` slots (429 when
    none is free): every open stream holds a task and a database cursor."""
    state = request.app.state
    if state.follows >= state.max_follows:
        node.metrics.inc("api_follows_refused_total")
        raise ApiError(429, f"{state.max_follows} follow streams already open (api.max_follows)")
    state.follows += 1

    def release() -> None:
        state.follows -= 1

    return _CountedStream(lines, release)


def follow_rows(request: Request, read: Callable[[int], Awaitable[Sequence[Row]]],
                signal: Callable[[], trio.Event], line: Callable[[Row], tuple[int, bytes]],
                cursor: int) -> AsyncIterator[bytes]:
    """The NDJSON body of a follow: ``read(cursor)`` rows after a cursor, each turned by
    ``line`` into (its cursor, one JSON line), waiting on ``signal()`` when there is nothing new.

    Lines go out in chunks of at most ``api.follow_buffer_bytes`` (one line bigger than that
    alone): the next chunk is built only once the previous one was handed to the connection,
    so a reader that does not read holds one chunk here and a socket buffer, never a backlog.
    """
    state = request.app.state
    limit: int = getattr(state, "follow_buffer_bytes", DEFAULT_FOLLOW_BUFFER)

    async def lines() -> AsyncIterator[bytes]:
        nonlocal cursor
        while True:
            waiter = signal()  # taken before the read, so a commit after it still wakes us
            rows = await read(cursor)
            chunk: list[bytes] = []
            size = 0
            for row in rows:
                cursor, encoded = line(row)
                if chunk and size + len(encoded) > limit:
                    yield b"".join(chunk)
                    chunk, size = [], 0
                chunk.append(encoded)
                size += len(encoded)
            if chunk:
                yield b"".join(chunk)
            if not rows:
                with trio.move_on_after(FOLLOW_POLL_S):
                    await waiter.wait()

    return lines()


async def _no_route(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    what = "no such route" if status == 404 else f"{request.method} not allowed here"
    return JSONResponse({"error": f"{what}: {request.url.path} (see /openapi.json)"},
                        status_code=status, headers=getattr(exc, "headers", None))


async def internal_error(request: Request, _exc: Exception) -> Response:
    # The guard logs the exception and counts the 500; this only keeps the answer JSON.
    request_id = request.scope.get("state", {}).get("request_id", "-")
    return JSONResponse(
        {"error": f"internal error (request id {request_id}; see the node log)"}, status_code=500
    )


def create_app(node: NodeRuntime, routes: list[ApiRoute],
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
