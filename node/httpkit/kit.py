"""The HTTP toolkit of the local API and of every route table (the node's, the applications',
the snapshot scheduler's): errors, route declarations, bounded bodies and JSON, follow streams.

It imports nothing of ``node``: a route table depends on this module and on the narrow
interface (a ``typing.Protocol`` beside its handlers) of what it reads, never on the runtime, so
the modules that build the node (``node.services``) can import every route table without an
import cycle (``tests/node/test_import_graph.py`` checks).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import trio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from node.httpkit.openapi import INT64_MAX, RouteDoc

__all__ = [
    "DEFAULT_FOLLOW_BUFFER", "DEFAULT_MAX_BODY", "FOLLOW_POLL_S", "MAX_JSON_DEPTH", "ApiError",
    "ApiRoute", "Counters", "Handler", "MetricsOwner", "RouteDoc", "follow_rows",
    "follow_stream", "int_param", "internal_error", "read_body", "read_json",
]

# A handler gets the object the app was created with (typed by each route table as the
# Protocol of what it reads) and the request.
Handler = Callable[[Any, Request], Awaitable[Response]]

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


class Counters(Protocol):
    """What the toolkit counts with (``node.telemetry.metrics.Metrics``)."""

    def inc(self, name: str, amount: float = 1, **labels: str) -> None: ...


class MetricsOwner(Protocol):
    """Anything holding the node's metrics: the first argument of ``follow_stream``."""

    @property
    def metrics(self) -> Counters: ...


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


def follow_stream(node: MetricsOwner, request: Request,
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


async def internal_error(request: Request, _exc: Exception) -> Response:
    # The guard logs the exception and counts the 500; this only keeps the answer JSON.
    request_id = request.scope.get("state", {}).get("request_id", "-")
    return JSONResponse(
        {"error": f"internal error (request id {request_id}; see the node log)"}, status_code=500
    )
