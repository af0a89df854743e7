"""The node's API routes: publish, read and follow channels (the peer routes: peer_routes.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from node.api.idempotency import IdempotencyKeys, check_key
from node.api.peer_routes import PEER_ROUTES
from node.api.publish import MAX_CONTENT_BYTES, batch_contents, content_of
from node.clock import Clock
from node.httpkit import ApiError, ApiRoute, follow_rows, follow_stream, int_param, read_json
from node.httpkit.openapi import INT64_MAX, Param, RouteDoc, arr, obj
from node.replication.channels import UnknownChannel
from storage import StoredEvent, count_events, read_channel, read_channel_ordered
from sync.errors import LocalProtocolError
from sync.sds import Delivered
from sync.sds.profile import peek_event

if TYPE_CHECKING:
    import trio

    from node.config.settings import Config
    from node.replication.channels import ChannelService
    from node.store.events import EventStore
    from node.telemetry.metrics import Metrics

__all__ = ["NODE_ROUTES", "EventsNode", "event_json"]


class EventsNode(Protocol):
    """What the event routes read of the node (``node.runtime.NodeRuntime``)."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> EventStore: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def channels(self) -> ChannelService | None: ...

    def require_channels(self) -> ChannelService: ...

    def commit_signal(self) -> trio.Event: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def idempotency(self) -> IdempotencyKeys: ...


MAX_PAGE = 10_000
# Rows per storage read while a page fills: small enough that one read of the largest events
# stays a few MiB, large enough that a page of small events takes few round trips.
FIRST_CHUNK = 100
MAX_CHUNK = 1000


def event_json(event: StoredEvent) -> dict[str, Any]:
    # Stored wires were checked (under their channel's SDS profile) when they came in.
    content = peek_event(event.wire).content
    try:
        text: str | None = content.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "seq": event.seq,
        "message_id": event.message_id,
        "channel": event.channel,
        "sender": event.sender,
        "lamport": event.lamport,
        "content": text,
        "content_b64": base64.b64encode(content).decode("ascii"),
        "received_at": event.received_at,
    }


def _channel(node: EventsNode, request: Request) -> str:
    name = request.path_params["channel"]
    if node.channels is None or name not in node.channels.channels:
        known = ", ".join(node.channels.names) if node.channels else ""
        raise ApiError(404, f"unknown channel {name!r}; this node replicates {known}")
    return str(name)


async def _publish(node: EventsNode, request: Request) -> Response:
    channel = _channel(node, request)
    api = node.config.api
    body = await read_json(request, max(api.max_body_bytes, api.publish_batch_max_bytes))
    batch = batch_contents(body, api.publish_batch_max_events)
    if batch is not None:
        return await _publish_batch(node, request, channel, batch)
    content = content_of(body)
    assert node.channels is not None

    def answer(delivered: Delivered) -> dict[str, Any]:
        return {"message_id": delivered.message_id, "lamport": delivered.lamport,
                "channel": channel, "sender": delivered.sender_id}

    key = request.headers.get("idempotency-key")
    if key is None:
        return JSONResponse(answer(await _send(node, channel, content)))
    keys = node.idempotency
    check_key(key)
    fingerprint = keys.fingerprint(channel, content)
    earlier = await keys.claim(key, fingerprint)
    if earlier is not None:
        return JSONResponse(earlier, headers={"Idempotent-Replayed": "true"})
    written = False
    try:
        delivered = await _send(node, channel, content, keys.writer(key, fingerprint, answer))
        written = True
    finally:
        await keys.release(key, written)
    return JSONResponse(answer(delivered))


async def _publish_batch(node: EventsNode, request: Request, channel: str,
                         contents: list[bytes]) -> Response:
    if "idempotency-key" in request.headers:
        raise ApiError(400, "Idempotency-Key is for single publishes, not batch bodies")
    try:
        sent, error = await node.require_channels().publish_many(channel, contents)
    except UnknownChannel:
        raise ApiError(404, f"unknown channel {channel!r}") from None
    except LocalProtocolError as exc:
        raise ApiError(409, f"events[0]: {exc}") from None
    node.metrics.inc("api_publish_batches_total")
    answers = [{"message_id": d.message_id, "lamport": d.lamport, "channel": channel,
                "sender": d.sender_id} for d in sent]
    if error is None:
        return JSONResponse({"events": answers})
    # A waku channel refused a repeated payload: what came before it is committed.
    node.metrics.inc("api_errors_total", status="409")
    return JSONResponse({"error": f"events[{len(sent)}]: {error}; the {len(sent)} before it "
                                  "were published", "events": answers}, status_code=409)


async def _send(node: EventsNode, channel: str, content: bytes,
                also: Callable[[Any, Delivered], None] | None = None) -> Delivered:
    try:
        delivered: Delivered = await node.require_channels().publish(channel, content, also)
    except UnknownChannel:
        raise ApiError(404, f"unknown channel {channel!r}") from None
    except LocalProtocolError as exc:  # a waku channel: this payload was sent already
        raise ApiError(409, str(exc)) from None
    return delivered


async def _read(node: EventsNode, request: Request) -> Response:
    """A page of events, bounded by ``limit`` rows and by ``api.page_max_bytes`` of JSON: it is
    built from small storage reads, and ``more`` tells the client to ask again from ``next``."""
    channel = _channel(node, request)
    limit = int_param(request, "limit", 1000, MAX_PAGE, minimum=1)
    order = request.query_params.get("order", "log")
    after = int_param(request, "after", 0)
    cursor: Any
    if order == "seq":
        cursor = after
    elif order == "log":
        cursor = None
        if "after_lamport" in request.query_params:
            after_id = request.query_params.get("after_id", "")
            if len(after_id) > 256:
                raise ApiError(400, "query parameter after_id is longer than a message id")
            cursor = (int_param(request, "after_lamport", 0), after_id)
    else:
        raise ApiError(400, "query parameter order must be log or seq")
    budget: int = request.app.state.page_max_bytes
    parts: list[bytes] = []
    size = 0
    more = False
    chunk = min(FIRST_CHUNK, limit)
    while len(parts) < limit and not more:
        if order == "seq":
            rows = await node.store.read(read_channel, channel, cursor, chunk)
        else:
            rows = await node.store.read(read_channel_ordered, channel, cursor, chunk)
        for event in rows:
            encoded = json.dumps(event_json(event)).encode()
            if parts and size + len(encoded) > budget:
                more = True
                break
            parts.append(encoded)
            size += len(encoded)
            cursor = event.seq if order == "seq" else (event.lamport, event.message_id)
        if len(rows) < chunk:
            break
        per_row = max(size // max(len(parts), 1), 1)
        chunk = max(1, min(MAX_CHUNK, limit - len(parts), (budget - size) // per_row + 1))
    more = more or len(parts) == limit
    nxt = None
    if more:
        nxt = {"after": cursor} if order == "seq" else {"after_lamport": cursor[0],
                                                         "after_id": cursor[1]}
    head = json.dumps({"channel": channel, "more": more, "next": nxt})[:-1].encode()
    return Response(head + b', "events": [' + b", ".join(parts) + b"]}",
                    media_type="application/json")


async def _follow(node: EventsNode, request: Request) -> Response:
    """NDJSON stream of new events in storage order, starting after ``after`` (a seq)."""
    channel = _channel(node, request)

    async def read(cursor: int) -> list[StoredEvent]:
        return await node.store.read(read_channel, channel, cursor, FIRST_CHUNK)

    def line(event: StoredEvent) -> tuple[int, bytes]:
        return event.seq, (json.dumps(event_json(event)) + "\n").encode()

    return follow_stream(node, request, follow_rows(
        request, read, node.commit_signal, line, int_param(request, "after", 0)))


async def _channels(node: EventsNode, _request: Request) -> Response:
    assert node.channels is not None
    out = []
    for name, ch in node.channels.channels.items():
        out.append({
            "channel": name,
            "lamport": ch.layers.incoming.lamport,
            # The log's length is the database's; memory holds only the newest ids.
            "delivered": await node.store.read(count_events, name),
            "delivered_in_memory": len(ch.layers.log),
            "waiting": len(ch.layers.incoming.waiting_ids),
            "missing": len(ch.layers.incoming.missing_ids),
            "unacknowledged": len(ch.layers.outgoing.ids),
        })
    return JSONResponse({"channels": out})


# -- the description ---------------------------------------------------------------------------

_INT = {"type": "integer", "minimum": 0, "maximum": INT64_MAX}
_CHANNEL = Param("channel", "path", {"type": "string", "minLength": 1, "maxLength": 128,
                                     "examples": ["general"]},
                 "Channel name (one this node replicates, see GET /v1/channels)")
EVENT_SCHEMA = obj({
    "seq": {**_INT, "description": "Local storage order (differs between nodes)"},
    "message_id": {"type": "string"}, "channel": {"type": "string"},
    "sender": {"type": "string", "description": "Peer id of the signer"},
    "lamport": _INT,
    "content": {"type": ["string", "null"], "description": "UTF-8 content, null if binary"},
    "content_b64": {"type": "string", "description": "The content bytes, base64"},
    "received_at": {"type": "integer", "description": "Epoch ms when this node stored it"},
})
PUBLISHED_SCHEMA = obj({"message_id": {"type": "string"}, "lamport": _INT,
                        "channel": {"type": "string"}, "sender": {"type": "string"}})
_ONE_EVENT = [
    obj({"content": {"type": "string", "minLength": 1, "examples": ["hello"]}}, extra=False),
    obj({"content_b64": {"type": "string", "contentEncoding": "base64", "minLength": 1}},
        extra=False),
]
PUBLISH_BODY = {
    "oneOf": [*_ONE_EVENT, obj({"events": {"type": "array", "minItems": 1,
                                           "items": {"oneOf": _ONE_EVENT}}}, extra=False)],
    "description": f"UTF-8 text or base64 bytes, at most {MAX_CONTENT_BYTES} bytes of content; "
                   "or a batch, {\"events\": [...]}: at most api.publish_batch_max_events "
                   "events in one transaction, answered {\"events\": [...]} once committed",
}
PAGE_SCHEMA = obj({
    "channel": {"type": "string"}, "events": arr(EVENT_SCHEMA),
    "more": {"type": "boolean", "description": "The page stopped at limit or at "
             "api.page_max_bytes: ask again with the query parameters in next"},
    "next": {"type": ["object", "null"], "description": "Cursor parameters of the next page"},
})
CHANNELS_SCHEMA = obj({"channels": arr(obj({
    "channel": {"type": "string"}, "lamport": _INT, "delivered": _INT,
    "delivered_in_memory": _INT, "waiting": _INT, "missing": _INT, "unacknowledged": _INT}))})

NODE_ROUTES: list[ApiRoute] = [
    ApiRoute("POST", "/v1/channels/{channel}/events",
             "Publish an event (or a batch); answers once it is committed", _publish, RouteDoc(
                 params=(_CHANNEL, Param(
                     "Idempotency-Key", "header",
                     {"type": "string", "minLength": 1, "maxLength": 128,
                      "pattern": "^[!-~]+$"},
                     "Repeating a key (within api.idempotency_ttl_s, while it is among "
                     "the newest api.idempotency_max_keys) returns the first answer, never "
                     "a second event")),
                 body=PUBLISH_BODY, response={"oneOf": [
                     PUBLISHED_SCHEMA, obj({"events": arr(PUBLISHED_SCHEMA)})]},
                 errors={404: "Unknown channel",
                         409: "A waku channel refused a repeated payload (in a batch: the "
                              "events before it were published and are listed)",
                         413: "Content, batch or body over its bound",
                         422: "Idempotency-Key already used for a different publish"})),
    ApiRoute("GET", "/v1/channels/{channel}/events",
             "Read a channel after a cursor (order=log|seq), bounded in rows and bytes", _read,
             RouteDoc(params=(
                 _CHANNEL,
                 Param("order", "query", {"type": "string", "enum": ["log", "seq"],
                                          "default": "log"},
                       "log: (lamport, message_id) order, the same on every node; seq: this "
                       "node's storage order"),
                 Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE,
                                          "default": 1000}, "Most events in the page"),
                 Param("after", "query", _INT, "order=seq: events stored after this seq"),
                 Param("after_lamport", "query", _INT, "order=log: cursor lamport"),
                 Param("after_id", "query", {"type": "string", "maxLength": 256},
                       "order=log: cursor message id (with after_lamport)"),
             ), response=PAGE_SCHEMA, errors={404: "Unknown channel"})),
    ApiRoute("GET", "/v1/channels/{channel}/follow",
             "Stream new events as NDJSON (one event object per line) in storage order",
             _follow, RouteDoc(
                 params=(_CHANNEL, Param("after", "query", _INT,
                                         "Start after this seq (default 0: everything)")),
                 media="application/x-ndjson", response={"type": "string"},
                 errors={404: "Unknown channel",
                         429: "api.max_follows streams already open"})),
    ApiRoute("GET", "/v1/channels", "Channels with their SDS state", _channels,
             RouteDoc(response=CHANNELS_SCHEMA)),
    *PEER_ROUTES,
]
