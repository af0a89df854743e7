"""The block streams plugin: its application, the producer side and the ``/v1/blocks`` routes.

Publishing (``POST /v1/blocks``) turns each block payload into Cardinal messages with the
node's :class:`sync.cardinal.Producer` and publishes every message as one event (see
``node.apps.blocks_app.encode_envelope``) on the channel its prefix routes to. Reading answers from
the tables the application keeps (``storage.blocks``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from node.apps.blocks_app import APP_NAME, BlocksApplication
from node.apps.runner import AppHost, LogApplication
from node.config.channels import blocks_channels
from node.config.settings import Config
from node.httpkit import (
    ApiError,
    ApiRoute,
    RouteDoc,
    follow_rows,
    follow_stream,
    int_param,
    read_json,
)
from node.httpkit.openapi import INT64_MAX, Param, arr, obj
from storage.blocks import (
    BlockChange,
    BlockRow,
    block_at,
    block_by_hash,
    get_head,
    last_change_seq,
    read_changes,
)
from sync.cardinal import (
    DEFAULT_LIMITS,
    HASH_SIZE,
    BlockPayload,
    Producer,
    RoutedMessage,
    encode_envelope,
    payload_from_json,
)
from sync.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["BlocksBundle", "BlocksPlugin", "change_json"]

# An event's content is capped by the API (512 KiB); leave room for the envelope.
MAX_MESSAGE_VALUE = 512 * 1024 - DEFAULT_LIMITS.max_key - 300
MAX_BLOCKS_PER_REQUEST = 1000
PUBLISH_CONCURRENCY = 64


def change_json(change: BlockChange) -> dict[str, Any]:
    return {"seq": change.seq, "kind": change.kind, "hash": "0x" + change.hash.hex(),
            "number": change.number, "at": change.at}


def _block_json(row: BlockRow) -> dict[str, Any]:
    return {"hash": "0x" + row.hash.hex(), "number": row.number, "parent": "0x" + row.parent.hex(),
            "weight": str(row.weight), "canonical": row.canonical, "applied_at": row.applied_at,
            "payload": json.loads(row.payload)}


def _payloads(objs: Any, where: str) -> list[BlockPayload]:
    if not isinstance(objs, list) or not objs:
        raise ApiError(400, f"{where} must be a non-empty list of block payloads")
    if len(objs) > MAX_BLOCKS_PER_REQUEST:
        raise ApiError(413, f"at most {MAX_BLOCKS_PER_REQUEST} blocks per request")
    out = []
    for i, item in enumerate(objs):
        try:
            out.append(payload_from_json(item))
        except RemoteProtocolError as exc:
            raise ApiError(400, f"{where}[{i}]: {exc.reason}") from None
    return out


# The database answers the same when it is off (node.apps.db_plugin.DB_OFF): 409, the node's
# configuration conflicts with the request, naming the key to set; 404 stays "no such thing".
BLOCKS_OFF = ("block streams are off on this node: set blocks.enabled = true "
              "(SYNCNODE_BLOCKS_ENABLED=true) with blocks.producers, and restart it")
_DISABLED = {409: "Block streams are off on this node (blocks.enabled)"}
_COUNT = {"type": "integer", "minimum": 0, "maximum": INT64_MAX}
_HASH = {"type": "string", "pattern": "^0x[0-9a-fA-F]{64}$"}
_PAYLOADS = arr({"type": "object", "description": "A block payload: hash, number, parent, "
                 "sub_batches (docs/cardinal.md)"}, minItems=1, maxItems=MAX_BLOCKS_PER_REQUEST)
_BLOCK = obj({"hash": _HASH, "number": _COUNT, "parent": _HASH,
              "weight": {"type": "string"}, "canonical": {"type": "boolean"},
              "applied_at": {"type": "integer"}, "payload": {"type": "object"}})


@dataclass
class BlocksBundle:
    blocks: BlocksApplication
    runtime: AppHost
    producer: Producer
    enabled: bool
    routes: list[ApiRoute] = field(default_factory=list)
    app: LogApplication = field(init=False)

    def __post_init__(self) -> None:
        self.app = self.blocks
        self.routes = [
            ApiRoute("POST", "/v1/blocks",
                     "Publish block payloads as Cardinal messages; answers once committed",
                     self._publish, RouteDoc(
                         body=obj({"blocks": _PAYLOADS}), errors=_DISABLED,
                         response=obj({"blocks": _COUNT, "messages": _COUNT}))),
            ApiRoute("POST", "/v1/blocks/reorg",
                     "Publish a deep reorg (Reorg, the new blocks, ReorgComplete) in order",
                     self._publish_reorg, RouteDoc(
                         body=obj({"ancestor": _HASH, "ancestor_number": _COUNT,
                                   "blocks": _PAYLOADS}),
                         response=obj({"blocks": _COUNT, "messages": _COUNT,
                                       "reorg_channel": {"type": "string"}}),
                         errors=_DISABLED)),
            ApiRoute("GET", "/v1/blocks/head", "The canonical head of the block stream",
                     self._head, RouteDoc(response=obj({
                         "stream": {"type": "string"}, "hash": _HASH, "number": _COUNT,
                         "weight": {"type": "string", "description": "Decimal"},
                         "updated_at": {"type": "integer"}}),
                         errors={**_DISABLED, 404: "No block applied yet"})),
            ApiRoute("GET", "/v1/blocks/follow",
                     "Stream applied and reverted blocks as NDJSON (after=SEQ, default now)",
                     self._follow, RouteDoc(
                         params=(Param("after", "query", _COUNT,
                                       "Start after this change seq (default: from now)"),),
                         media="application/x-ndjson", response={"type": "string"},
                         errors={**_DISABLED, 429: "api.max_follows streams already open"})),
            ApiRoute("GET", "/v1/blocks/{ref}",
                     "A block by number (canonical) or 0x hash", self._get, RouteDoc(
                         params=(Param("ref", "path", {"type": "string", "minLength": 1,
                                                       "maxLength": 80, "examples": ["0"]},
                                       "A block number (decimal) or a 0x + 64 hex hash"),),
                         response=_BLOCK,
                         errors={**_DISABLED, 404: "No such block"})),
        ]

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise ApiError(409, BLOCKS_OFF)

    def _check_producer(self) -> None:
        self._check_enabled()
        if self.runtime.peer_id not in self.blocks.producers:
            raise ApiError(403, "this node is not in blocks.producers: every consumer would "
                                "drop its block messages")

    async def _send(self, messages: list[RoutedMessage], *, reorg: str | None = None) -> None:
        channels = self.runtime.require_channels()
        if reorg is not None:
            # A reorg channel must be delivered in order: one at a time, on the default channel.
            for m in messages:
                await channels.publish(self.blocks.stream, encode_envelope(m.key, m.value, reorg))
            return
        # Ordinary block messages may arrive in any order: publish them concurrently so that
        # the event store commits them in a few transactions rather than one each.
        limiter = trio.CapacityLimiter(PUBLISH_CONCURRENCY)

        async def one(m: RoutedMessage) -> None:
            async with limiter:
                await channels.publish(m.channel, encode_envelope(m.key, m.value))

        async with trio.open_nursery() as nursery:
            for m in messages:
                nursery.start_soon(one, m)

    def _produce(self, payloads: list[BlockPayload]) -> list[RoutedMessage]:
        try:
            return [m for p in payloads for m in self.producer.messages_for(p)]
        except LocalProtocolError as exc:
            raise ApiError(400, str(exc)) from None

    async def _publish(self, _node: AppHost, request: Request) -> Response:
        self._check_producer()
        body = await read_json(request, max_bytes=16 * 1024 * 1024)
        if not isinstance(body, dict):
            raise ApiError(400, 'body must be {"blocks": [payload, ...]}')
        payloads = _payloads(body.get("blocks"), "blocks")
        messages = self._produce(payloads)
        await self._send(messages)
        return JSONResponse({"blocks": len(payloads), "messages": len(messages)})

    async def _publish_reorg(self, _node: AppHost, request: Request) -> Response:
        self._check_producer()
        body = await read_json(request, max_bytes=16 * 1024 * 1024)
        if not isinstance(body, dict):
            raise ApiError(400, 'body must be {"ancestor": "0x..", "ancestor_number": N, '
                                '"blocks": [payload, ...]}')
        ancestor = _hash_of(body.get("ancestor"))
        number = body.get("ancestor_number")
        if ancestor is None or not isinstance(number, int) or number < 0:
            raise ApiError(400, "ancestor (0x + 64 hex) and ancestor_number (>= 0) are required")
        payloads = _payloads(body.get("blocks"), "blocks")
        try:
            messages = self.producer.reorg_messages(ancestor, number, payloads)
        except LocalProtocolError as exc:
            raise ApiError(400, str(exc)) from None
        await self._send(messages, reorg=messages[0].channel)
        return JSONResponse({"blocks": len(payloads), "messages": len(messages),
                             "reorg_channel": messages[0].channel})

    async def _head(self, node: AppHost, _request: Request) -> Response:
        self._check_enabled()
        head = await node.store.read(get_head, self.blocks.stream)
        if head is None:
            raise ApiError(404, "no block applied yet")
        return JSONResponse({"stream": self.blocks.stream, "hash": "0x" + head.hash.hex(),
                             "number": head.number, "weight": str(head.weight),
                             "updated_at": head.updated_at})

    async def _get(self, node: AppHost, request: Request) -> Response:
        self._check_enabled()
        ref = str(request.path_params["ref"])
        if ref.isdigit():
            row = await node.store.read(block_at, self.blocks.stream, int(ref))
        else:
            block_hash = _hash_of(ref)
            if block_hash is None:
                raise ApiError(400, "expected a block number or a 0x-prefixed 32-byte hash")
            row = await node.store.read(block_by_hash, self.blocks.stream, block_hash)
        if row is None:
            raise ApiError(404, f"no block {ref}")
        return JSONResponse(_block_json(row))

    async def _follow(self, node: AppHost, request: Request) -> Response:
        self._check_enabled()
        if request.query_params.get("after") is None:
            cursor = await node.store.read(last_change_seq, self.blocks.stream)
        else:
            cursor = int_param(request, "after", 0)
        stream = self.blocks.stream

        async def read(after: int) -> list[BlockChange]:
            return await node.store.read(read_changes, stream, after, 1000)

        def line(change: BlockChange) -> tuple[int, bytes]:
            return change.seq, (json.dumps(change_json(change)) + "\n").encode()

        return follow_stream(node, request, follow_rows(
            request, read, self.blocks.change_signal, line, cursor))


def _hash_of(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    text = value[2:] if value.startswith("0x") else value
    if len(text) != 2 * HASH_SIZE:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


class BlocksPlugin:
    """Declared in ``node.apps.plugins.PLUGINS``; costs nothing unless ``blocks.enabled``."""

    name = APP_NAME

    def channels(self, config: Config) -> list[str]:
        return blocks_channels(config)

    def build(self, runtime: AppHost) -> BlocksBundle:
        section = runtime.config.blocks
        app = BlocksApplication(section, runtime.metrics, clock=runtime.clock)
        producer = Producer(app.router, subbatch_chunk=section.subbatch_chunk,
                            layout=section.producer_layout,
                            limits=replace(DEFAULT_LIMITS, max_value=MAX_MESSAGE_VALUE))
        for name, help_text in (
            ("blocks_applied_total", "Blocks applied to the canonical chain"),
            ("blocks_reverted_total", "Blocks taken off the canonical chain"),
            ("blocks_failed_total", "Blocks on which producers disagree"),
            ("blocks_rejected_total", "Malformed block messages (counted by reason)"),
            ("blocks_reorgs_total", "Deep reorg messages followed, finished or ignored"),
        ):
            runtime.metrics.describe(name, "counter", help_text)
        if section.enabled:
            runtime.metrics.gauge_fn(
                "blocks_pending", lambda: float(app.consumer.pending_count() if app.consumer
                                                else 0),
                "Blocks being reassembled or held in the block tree")
            runtime.metrics.gauge_fn(
                "blocks_excess_producers", lambda: float(
                    app.consumer.stats.excess_producers if app.consumer else 0),
                "Sub batch messages set aside: more producers than held per sub batch")
        return BlocksBundle(app, runtime, producer, section.enabled)
