"""The replicated database plugin: its application and the ``/v1/db`` routes.

A write (``POST /v1/db/{table}``) is checked against the declared schema first (a write this
node's own replica would reject is refused with 400/403 and never published), then published as
one event on the db channel. The answer comes once the event is committed *and* the database
application has applied it (or after ``WRITE_WAIT_S``, with ``"applied": false``), so a ``get``
after a write sees it, unless a newer write to the same cells won. Reads answer from the tables
the application keeps (``storage.crdt``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from node.api import ApiError, ApiRoute, RouteDoc, read_json
from node.apps import LogApplication
from node.config import Config
from node.db_app import APP_NAME, METRICS, DbApplication
from node.openapi import Param, arr, obj
from storage import events_by_message_ids
from storage.crdt import StoredRow, get_row, query_rows
from sync.crdt import (
    ColumnType,
    CrdtMessage,
    Operation,
    RejectReason,
    TableSchema,
    Value,
    validate_message,
)
from sync.errors import LocalProtocolError

if TYPE_CHECKING:
    from node.runtime import NodeRuntime

__all__ = ["WRITE_WAIT_S", "DbBundle", "DbPlugin", "row_json", "schema_json"]

WRITE_WAIT_S = 10.0
MAX_PAGE = 10_000


def schema_json(schema: TableSchema) -> dict[str, Any]:
    return {"columns": {c: ColumnType(t).value for c, t in schema.columns.items()},
            "writers": None if schema.writers is None else sorted(schema.writers)}


def row_json(schema: TableSchema, row: StoredRow) -> dict[str, Value]:
    """The row with every declared column (null where never written), its id under ``id``."""
    return {"id": row.entity_id, **{c: row.values.get(c) for c in schema.columns}}


def _typed(schema: TableSchema, values: dict[str, Any]) -> dict[str, Any]:
    # JSON has one number type for clients: a whole number is accepted for a real column.
    out = dict(values)
    for column, value in values.items():
        if (schema.column_type(column) is ColumnType.REAL and isinstance(value, int)
                and not isinstance(value, bool) and math.isfinite(value)):
            out[column] = float(value)
    return out


_TABLE = Param("table", "path", {"type": "string", "minLength": 1, "maxLength": 128,
                                 "examples": ["kv"]},
               "A table declared in db.tables")


@dataclass
class DbBundle:
    db: DbApplication
    runtime: Any  # NodeRuntime
    routes: list[Any] = field(default_factory=list)
    app: LogApplication = field(init=False)

    def __post_init__(self) -> None:
        self.app = self.db
        self.routes = [
            ApiRoute("GET", "/v1/db", "Replicated tables declared on this node (db.tables)",
                     self._tables, RouteDoc(response=obj({
                         "channel": {"type": "string"},
                         "tables": {"type": "object", "additionalProperties": {"type": "object"}},
                     }))),
            ApiRoute("POST", "/v1/db/{table}",
                     'Write a record: {"op": "upsert"|"update"|"delete", "id": ID, "values": '
                     '{...}}; answers once committed and applied', self._write, RouteDoc(
                         params=(_TABLE,),
                         body=obj({"op": {"enum": ["upsert", "update", "delete"]},
                                   "id": {"type": ["string", "integer"]}},
                                  {"values": {"type": "object",
                                              "description": "COLUMN: VALUE, typed as declared"}}),
                         response=obj({"message_id": {"type": "string"},
                                       "lamport": {"type": "integer"},
                                       "seq": {"type": "integer"},
                                       "applied": {"type": "boolean"}}),
                         errors={403: "This node may not write the table (writers)",
                                 404: "No such replicated table"})),
            ApiRoute("GET", "/v1/db/{table}",
                     "Visible rows in id order (after=ID, limit=N)", self._query, RouteDoc(
                         params=(_TABLE,
                                 Param("after", "query", {"type": "string"},
                                       "Rows with ids after this one"),
                                 Param("limit", "query", {"type": "integer", "minimum": 1,
                                                          "maximum": MAX_PAGE, "default": 1000},
                                       "Most rows")),
                         response=obj({"rows": arr({"type": "object"}),
                                       "next_after": {"type": ["string", "null"]}}),
                         errors={404: "No such replicated table"})),
            ApiRoute("GET", "/v1/db/{table}/{entity_id:path}", "One visible row by id",
                     self._get, RouteDoc(
                         params=(_TABLE, Param("entity_id", "path", {"type": "string"},
                                               "The row id (percent-encode a /)")),
                         response={"type": "object"},
                         errors={404: "No such table or row"})),
        ]

    def _schema(self, request: Request) -> TableSchema:
        name = str(request.path_params["table"])
        schema = self.db.schemas.get(name)
        if schema is None:
            known = ", ".join(sorted(self.db.schemas)) or "none (set db.tables)"
            raise ApiError(404, f"no replicated table {name!r}; declared: {known}")
        return schema

    async def _tables(self, _node: NodeRuntime, _request: Request) -> Response:
        return JSONResponse({
            "channel": self.db.section.channel,
            "tables": {s.name: schema_json(s) for s in self.db.schemas.values()},
        })

    async def _write(self, node: NodeRuntime, request: Request) -> Response:
        schema = self._schema(request)
        body = await read_json(request, max_bytes=256 * 1024)
        if not isinstance(body, dict) or not isinstance(body.get("values", {}), dict):
            raise ApiError(400, 'body must be {"op": "upsert"|"update"|"delete", "id": ID, '
                                '"values": {COLUMN: VALUE, ...}}')
        try:
            operation = Operation(str(body.get("op")))
        except ValueError:
            raise ApiError(400, "op must be upsert, update or delete") from None
        entity_id = body.get("id")
        if operation is Operation.UPDATE and body.get("pending") is not True and isinstance(
                entity_id, str) and await node.store.read(
                    get_row, schema.name, entity_id, list(schema.columns)) is None:
            # An update of a record that does not exist (yet) waits in the mempool for its
            # upsert, maybe forever: say so rather than answer "applied".
            raise ApiError(404, f"no row {entity_id!r} in {schema.name}: update changes an "
                                "existing record (upsert creates one; \"pending\": true queues "
                                "the update until the record arrives from a peer)")
        try:
            message = CrdtMessage(operation, schema.name, entity_id,  # type: ignore[arg-type]
                                  _typed(schema, body.get("values", {})), sender=node.peer_id)
        except LocalProtocolError as exc:
            raise ApiError(400, str(exc)) from None
        rejection = validate_message(self.db.schemas, message)
        if rejection is not None:
            status = 403 if rejection.reason is RejectReason.UNAUTHORISED_WRITER else 400
            raise ApiError(status, f"{rejection.reason.value}: {rejection.detail}")
        delivered = await node.channels.publish(self.db.section.channel, message.encoded)
        found = await node.store.read(events_by_message_ids, [delivered.message_id])
        seq = found[0].seq if found else 0
        applied = await self._wait_applied(seq)
        return JSONResponse({"message_id": delivered.message_id, "lamport": delivered.lamport,
                             "seq": seq, "applied": applied})

    async def _wait_applied(self, seq: int) -> bool:
        with trio.move_on_after(WRITE_WAIT_S):
            while self.db.applied_seq < seq:
                await self.db.change_signal().wait()
        return self.db.applied_seq >= seq

    async def _get(self, node: NodeRuntime, request: Request) -> Response:
        schema = self._schema(request)
        entity_id = str(request.path_params["entity_id"])
        row = await node.store.read(get_row, schema.name, entity_id, list(schema.columns))
        if row is None:
            raise ApiError(404, f"no row {entity_id!r} in {schema.name}")
        return JSONResponse(row_json(schema, row))

    async def _query(self, node: NodeRuntime, request: Request) -> Response:
        schema = self._schema(request)
        after = request.query_params.get("after")
        raw_limit = request.query_params.get("limit", "1000")
        if not raw_limit.isdigit() or not 0 < int(raw_limit) <= MAX_PAGE:
            raise ApiError(400, f"limit must be an integer in 1..{MAX_PAGE}")
        limit = int(raw_limit)
        rows = await node.store.read(query_rows, schema.name, list(schema.columns), after,
                                     limit)
        return JSONResponse({
            "rows": [row_json(schema, r) for r in rows],
            "next_after": rows[-1].entity_id if len(rows) == limit else None,
        })


class DbPlugin:
    """Declared in ``node.plugins.PLUGINS``; costs nothing unless ``db.tables`` declares one."""

    name = APP_NAME

    def channels(self, config: Config) -> list[str]:
        return [config.db.channel] if config.db.tables else []

    def build(self, runtime: NodeRuntime) -> DbBundle:
        app = DbApplication(runtime.config.db, runtime.metrics)
        metrics = runtime.metrics
        for name, help_text in METRICS.items():
            metrics.describe(name, "counter", help_text)
        metrics.gauge_fn("db_mempool_size", lambda: float(app.mempool_size),
                         "Updates waiting in the mempool for their record's first upsert")
        return DbBundle(app, runtime)
