"""The node's API routes: publish, read and follow channels, peers, join."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from node.api import ApiError, ApiRoute, read_json
from node.channels import UnknownChannel
from node.p2p import P2PError
from storage import StoredEvent, count_events, read_channel, read_channel_ordered
from sync.sds import decode_event

if TYPE_CHECKING:
    from node.runtime import NodeRuntime

__all__ = ["NODE_ROUTES", "event_json"]

MAX_CONTENT_BYTES = 512 * 1024
MAX_PAGE = 10_000


def event_json(event: StoredEvent) -> dict[str, Any]:
    content = decode_event(event.wire, verify_signature=False).content
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


def _channel(node: NodeRuntime, request: Request) -> str:
    name = request.path_params["channel"]
    if node.channels is None or name not in node.channels.channels:
        known = ", ".join(node.channels.names) if node.channels else ""
        raise ApiError(404, f"unknown channel {name!r}; this node replicates {known}")
    return str(name)


def _int_param(request: Request, name: str, default: int, maximum: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"query parameter {name} must be an integer") from None
    if value < 0 or (maximum is not None and value > maximum):
        raise ApiError(400, f"query parameter {name} out of range")
    return value


async def _publish(node: NodeRuntime, request: Request) -> Response:
    channel = _channel(node, request)
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(400, 'body must be {"content": "..."} or {"content_b64": "..."}')
    if isinstance(body.get("content"), str):
        content = body["content"].encode("utf-8")
    elif isinstance(body.get("content_b64"), str):
        try:
            content = base64.b64decode(body["content_b64"], validate=True)
        except binascii.Error:
            raise ApiError(400, "content_b64 is not valid base64") from None
    else:
        raise ApiError(400, 'body must be {"content": "..."} or {"content_b64": "..."}')
    if not content:
        raise ApiError(400, "content must not be empty (empty content is an SDS sync message)")
    if len(content) > MAX_CONTENT_BYTES:
        raise ApiError(413, f"content over {MAX_CONTENT_BYTES} bytes")
    assert node.channels is not None
    try:
        delivered = await node.channels.publish(channel, content)
    except UnknownChannel:
        raise ApiError(404, f"unknown channel {channel!r}") from None
    return JSONResponse({"message_id": delivered.message_id, "lamport": delivered.lamport,
                         "channel": channel, "sender": delivered.sender_id})


async def _read(node: NodeRuntime, request: Request) -> Response:
    channel = _channel(node, request)
    limit = _int_param(request, "limit", 1000, MAX_PAGE)
    order = request.query_params.get("order", "log")
    if order == "seq":
        rows = await node.store.read(read_channel, channel, _int_param(request, "after", 0), limit)
    elif order == "log":
        after = None
        if "after_lamport" in request.query_params:
            after = (_int_param(request, "after_lamport", 0),
                     request.query_params.get("after_id", ""))
        rows = await node.store.read(read_channel_ordered, channel, after, limit)
    else:
        raise ApiError(400, "order must be log or seq")
    return JSONResponse({"channel": channel, "events": [event_json(e) for e in rows]})


async def _follow(node: NodeRuntime, request: Request) -> Response:
    """NDJSON stream of new events in storage order, starting after ``after`` (a seq)."""
    channel = _channel(node, request)
    cursor = _int_param(request, "after", 0)

    async def lines() -> AsyncIterator[bytes]:
        nonlocal cursor
        while True:
            rows = await node.store.read(read_channel, channel, cursor, 1000)
            for event in rows:
                yield (json.dumps(event_json(event)) + "\n").encode()
                cursor = event.seq
            if not rows:
                with trio.move_on_after(1.0):
                    await node.commit_signal().wait()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def _peers(node: NodeRuntime, _request: Request) -> Response:
    peers = [
        {"peer_id": p.peer_id, "address": p.address, "direction": p.direction,
         "connected_since": p.connected_since}
        for p in node.host.peers()
    ]
    known = sorted(node.peers.known) if node.peers is not None else []
    return JSONResponse({"connected": peers, "known": known})


async def _join(node: NodeRuntime, request: Request) -> Response:
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("multiaddr"), str):
        raise ApiError(400, 'body must be {"multiaddr": "/ip4/.../tcp/.../p2p/<peer id>"}')
    assert node.peers is not None
    try:
        peer_id = await node.peers.join(body["multiaddr"])
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    except P2PError as exc:
        raise ApiError(502, f"cannot connect: {exc}") from None
    return JSONResponse({"peer_id": peer_id, "multiaddr": body["multiaddr"]})


async def _channels(node: NodeRuntime, _request: Request) -> Response:
    assert node.channels is not None
    out = []
    for name, ch in node.channels.channels.items():
        out.append({
            "channel": name,
            "lamport": ch.lamport,
            # The log's length is the database's; memory holds only the newest ids.
            "delivered": await node.store.read(count_events, name),
            "delivered_in_memory": ch.delivered_in_memory,
            "waiting": len(ch.waiting_ids),
            "missing": len(ch.missing_ids),
            "unacknowledged": len(ch.outgoing_ids),
        })
    return JSONResponse({"channels": out})


NODE_ROUTES: list[ApiRoute] = [
    ApiRoute("POST", "/v1/channels/{channel}/events",
             "Publish an event; answers once it is committed", _publish),
    ApiRoute("GET", "/v1/channels/{channel}/events",
             "Read a channel after a cursor (order=log|seq)", _read),
    ApiRoute("GET", "/v1/channels/{channel}/follow", "Stream new events as NDJSON", _follow),
    ApiRoute("GET", "/v1/channels", "Channels with their SDS state", _channels),
    ApiRoute("GET", "/v1/peers", "Connected and known peers", _peers),
    ApiRoute("POST", "/v1/peers", "Join: connect to a peer and remember it", _join),
]

