"""The replicated database plugin: its application and the ``/v1/db`` routes.

A write (``POST /v1/db/{table}``) is checked against the table's latest schema version first (a
write this node's own replica would reject is refused with 400/403 and never published), then
published as one event on the db channel. Schemas are declarations on the same channel:
``GET /v1/db-schemas/{table}`` lists a table's versions, ``POST`` publishes a new one (only the
owner's count), and the node declares the tables of its config the log does not have yet. The
answer comes once the event is committed *and* the database
application has applied it (or after ``WRITE_WAIT_S``, with ``"applied": false``), so a ``get``
after a write sees it, unless a newer write to the same cells won. Reads answer from the tables
the application keeps (``storage.crdt``). JSON views: db_json.py; publishing and declaring the
config's tables: db_publish.py.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from node.apps.db_app import APP_NAME, DbApplication
from node.apps.db_feed import WHERE_PARAM, changes_route, parse_where
from node.apps.db_json import history_json, row_json, schema_json, typed_values
from node.apps.db_metrics import METRICS
from node.apps.db_publish import SchemaSeeder, publish_and_wait
from node.apps.runner import AppHost, LogApplication
from node.config.channels import db_channels
from node.config.settings import Config
from node.httpkit import ApiError, ApiRoute, RouteDoc, read_json
from node.httpkit.openapi import Param, arr, obj
from storage.crdt import count_rows, get_row, load_states, query_rows
from sync.crdt import (
    CrdtMessage,
    Operation,
    RejectReason,
    SchemaDeclaration,
    TableSchema,
    validate_against,
)
from sync.errors import LocalProtocolError

__all__ = ["DbBundle", "DbPlugin"]

log = logging.getLogger("syncnode.db")

MAX_PAGE = 10_000
DB_OFF = ("the replicated database is off on this node: set db.enabled = true "
          "(SYNCNODE_DB_ENABLED=true) or declare a table under [db.tables] in the config of "
          "every node of the group, and restart them")


_OFF = "The replicated database is off on this node (db.enabled, db.tables)"
_TABLE = Param("table", "path", {"type": "string", "minLength": 1, "maxLength": 128,
                                 "examples": ["kv"]},
               "A replicated table (declared on the log)")


@dataclass
class DbBundle:
    db: DbApplication
    runtime: AppHost
    routes: list[Any] = field(default_factory=list)
    services: list[Any] = field(default_factory=list)
    app: LogApplication = field(init=False)

    def __post_init__(self) -> None:
        self.app = self.db
        self.routes = [
            ApiRoute("GET", "/v1/db", "Replicated tables: their latest schema versions",
                     self._tables, RouteDoc(response=obj({
                         "channel": {"type": "string"},
                         "enabled": {"type": "boolean", "description":
                                     "Whether this node replicates the db channel "
                                     "(db.enabled, or a table in db.tables)"},
                         "tables": {"type": "object", "additionalProperties": obj({
                             "columns": {"type": "object",
                                         "additionalProperties": {"type": "string"}},
                             "writers": {"type": ["array", "null"], "items": {"type": "string"}},
                             "owner": {"type": "string"},
                             "versions": {"type": "integer"},
                             "rows": {"type": "integer", "description": "Visible rows"}})},
                     }))),
            ApiRoute("GET", "/v1/db-schemas/{table}",
                     "A table's owner, schema versions and column epochs", self._schema_get,
                     RouteDoc(params=(_TABLE,),
                              response=obj({
                                  "table": {"type": "string"},
                                  "owner": {"type": "string"},
                                  "versions": arr(obj({
                                      "version": {"type": "integer"},
                                      "lamport": {"type": "integer"},
                                      "sender": {"type": "string"},
                                      "columns": {"type": "object",
                                                  "additionalProperties": {"type": "string"}},
                                      "writers": {"type": ["array", "null"],
                                                  "items": {"type": "string"}}})),
                                  "epochs": {"type": "object",
                                             "additionalProperties": {"type": "integer"},
                                             "description": "COLUMN: Lamport time of the "
                                                            "version that (re)typed it"}}),
                              errors={404: "No such replicated table", 409: _OFF})),
            ApiRoute("POST", "/v1/db-schemas/{table}",
                     'Declare a schema version: {"columns": {COLUMN: TYPE}, "writers": [...] | '
                     'null}; only the owner\'s count', self._schema_post, RouteDoc(
                         params=(_TABLE,),
                         body=obj({"columns": {"type": "object",
                                               "additionalProperties": {
                                                   "enum": ["text", "integer", "real",
                                                            "boolean"]}}},
                                  {"writers": {"type": ["array", "null"],
                                               "items": {"type": "string"}}}, extra=False),
                         response=obj({"message_id": {"type": "string"},
                                       "lamport": {"type": "integer"},
                                       "seq": {"type": "integer"},
                                       "applied": {"type": "boolean"}}),
                         errors={403: "This node does not own the table or is not in "
                                      "db.declarers",
                                 409: _OFF})),
            ApiRoute("POST", "/v1/db/{table}",
                     'Write a record: {"op": "upsert"|"update"|"delete", "id": ID, "values": '
                     '{...}}; answers once committed and applied', self._write, RouteDoc(
                         params=(_TABLE,),
                         body=obj({"op": {"enum": ["upsert", "update", "delete"]},
                                   "id": {"type": ["string", "integer"]}},
                                  {"values": {"type": "object",
                                              "description": "COLUMN: VALUE, typed as declared"},
                                   "pending": {"type": "boolean", "description":
                                               "update: park it until the record arrives; "
                                               "delete: write the tombstone although this "
                                               "node has not seen the record (instead of "
                                               "answering 404)"}}),
                         response=obj({"message_id": {"type": "string"},
                                       "lamport": {"type": "integer"},
                                       "seq": {"type": "integer"},
                                       "applied": {"type": "boolean"}}),
                         errors={403: "This node may not write the table (writers)",
                                 404: "No such replicated table or (delete) no such row",
                                 409: _OFF})),
            ApiRoute("GET", "/v1/db/{table}",
                     "Visible rows in id order (after=ID, limit=N, where=COLUMN=VALUE)",
                     self._query, RouteDoc(
                         params=(_TABLE, WHERE_PARAM,
                                 Param("after", "query", {"type": "string"},
                                       "Rows with ids after this one"),
                                 Param("limit", "query", {"type": "integer", "minimum": 1,
                                                          "maximum": MAX_PAGE, "default": 1000},
                                       "Most rows")),
                         response=obj({"rows": arr({"type": "object"}),
                                       "next_after": {"type": ["string", "null"]}}),
                         errors={404: "No such replicated table", 409: _OFF})),
            # Before the row route: a row whose id is "changes" is read with ?where=id=changes.
            changes_route(self.db, _TABLE, self._require_active),
            ApiRoute("GET", "/v1/db/{table}/{entity_id:path}", "One visible row by id",
                     self._get, RouteDoc(
                         params=(_TABLE, Param("entity_id", "path", {"type": "string"},
                                               "The row id (percent-encode a /)")),
                         response={"type": "object"},
                         errors={404: "No such table or row", 409: _OFF})),
        ]
        if self.db.channels:
            self.services = [SchemaSeeder(self.db, self.runtime)]

    def _require_active(self) -> None:
        """A write or declaration on a node that replicates no db channel: say how to turn
        the database on rather than fail inside the publish (issue 29: it was a 500)."""
        if not self.db.channels:
            raise ApiError(409, DB_OFF)

    def _schema(self, request: Request) -> TableSchema:
        self._require_active()
        name = str(request.path_params["table"])
        schema = self.db.book.latest(name)
        if schema is None:
            known = ", ".join(self.db.book.tables()) or "none yet"
            raise ApiError(404, f"no replicated table {name!r}; declared: {known}")
        return schema

    async def _tables(self, node: AppHost, _request: Request) -> Response:
        book = self.db.book
        counts = await node.store.read(count_rows)
        tables = {}
        for name in book.tables():
            history = book.history(name)
            assert history is not None and history.latest is not None
            tables[name] = {**schema_json(history.latest), "owner": history.owner,
                            "versions": len(history.versions), "rows": counts.get(name, 0)}
        return JSONResponse({"channel": self.db.section.channel,
                             "enabled": bool(self.db.channels), "tables": tables})

    async def _schema_get(self, _node: AppHost, request: Request) -> Response:
        name = str(request.path_params["table"])
        history = self.db.book.history(name)
        if history is None:
            known = ", ".join(self.db.book.tables()) or "none yet"
            raise ApiError(404, f"no replicated table {name!r}; declared: {known}")
        return JSONResponse(history_json(history))

    async def _schema_post(self, node: AppHost, request: Request) -> Response:
        self._require_active()
        name = str(request.path_params["table"])
        body = await read_json(request, max_bytes=256 * 1024)
        if not isinstance(body, dict) or not isinstance(body.get("columns"), dict) or (
                set(body) - {"columns", "writers"}):
            raise ApiError(400, 'body must be {"columns": {COLUMN: TYPE, ...}, "writers": '
                                '[PEER_ID, ...] | null}')
        writers = body.get("writers")
        if writers is not None and (not isinstance(writers, list)
                                    or not all(isinstance(w, str) for w in writers)):
            raise ApiError(400, "writers must be null or a list of peer ids")
        try:
            declaration = SchemaDeclaration(name, body["columns"],
                                            None if writers is None else frozenset(writers),
                                            sender=node.peer_id)
        except LocalProtocolError as exc:
            raise ApiError(400, str(exc)) from None
        declarers = self.db.section.declarers
        if declarers and node.peer_id not in declarers:
            raise ApiError(403, "this node is not in db.declarers; its declarations would not "
                                "count")
        history = self.db.book.history(name)
        if history is not None and history.owner != node.peer_id:
            raise ApiError(403, f"table {name} is owned by {history.owner}; only its "
                                "declarations count")
        answer = await publish_and_wait(self.db, node, declaration.encoded)
        return JSONResponse(answer)

    async def _write(self, node: AppHost, request: Request) -> Response:
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
                    get_row, schema.name, entity_id, self._epochs(schema)) is None:
            # An update of a record that does not exist (yet) is parked until its upsert
            # arrives, maybe forever: say so rather than answer "applied".
            raise ApiError(404, f"no row {entity_id!r} in {schema.name}: update changes an "
                                "existing record (upsert creates one; \"pending\": true queues "
                                "the update until the record arrives from a peer)")
        if operation is Operation.DELETE and body.get("pending") is not True and isinstance(
                entity_id, str) and not (
                await node.store.read(load_states, [(schema.name, entity_id)])):
            # Nothing known of it, not even a tombstone: most likely a typo (issue 29).
            raise ApiError(404, f"no row {entity_id!r} in {schema.name}: this node has never "
                                "seen it written, so there is nothing to delete (\"pending\": "
                                "true deletes it anyway, for a record still to come from a "
                                "peer)")
        try:
            message = CrdtMessage(operation, schema.name, entity_id,  # type: ignore[arg-type]
                                  typed_values(schema, body.get("values", {})), sender=node.peer_id)
        except LocalProtocolError as exc:
            raise ApiError(400, str(exc)) from None
        # This node's next Lamport time is past every version it knows: the latest judges it.
        rejection = validate_against(schema, message)
        if rejection is not None:
            status = 403 if rejection.reason is RejectReason.UNAUTHORISED_WRITER else 400
            raise ApiError(status, f"{rejection.reason.value}: {rejection.detail}")
        return JSONResponse(await publish_and_wait(self.db, node, message.encoded))

    def _epochs(self, schema: TableSchema) -> dict[str, int]:
        epochs = self.db.book.epochs(schema.name)
        return {column: epochs.get(column, -1) for column in schema.columns}

    async def _get(self, node: AppHost, request: Request) -> Response:
        schema = self._schema(request)
        entity_id = str(request.path_params["entity_id"])
        row = await node.store.read(get_row, schema.name, entity_id,
                                    self._epochs(schema))
        if row is None:
            raise ApiError(404, f"no row {entity_id!r} in {schema.name}")
        return JSONResponse(row_json(schema, row))

    async def _query(self, node: AppHost, request: Request) -> Response:
        schema = self._schema(request)
        after = request.query_params.get("after")
        raw_limit = request.query_params.get("limit", "1000")
        if not raw_limit.isdigit() or not 0 < int(raw_limit) <= MAX_PAGE:
            raise ApiError(400, f"limit must be an integer in 1..{MAX_PAGE}")
        limit = int(raw_limit)
        where = parse_where(schema, request.query_params.getlist("where"))
        rows = await node.store.read(query_rows, schema.name, self._epochs(schema), after,
                                     limit, where)
        return JSONResponse({
            "rows": [row_json(schema, r) for r in rows],
            "next_after": rows[-1].entity_id if len(rows) == limit else None,
        })


class DbPlugin:
    """Declared in ``node.apps.plugins.PLUGINS``; costs nothing unless ``db.tables`` seeds one."""

    name = APP_NAME

    def channels(self, config: Config) -> list[str]:
        return db_channels(config)

    def build(self, runtime: AppHost) -> DbBundle:
        standing = runtime.standing
        # A signed takeover declaration is evidence about its signer (not its relay).
        charge = (None if standing is None
                  else functools.partial(standing.penalise, reason="takeover"))
        app = DbApplication(runtime.config.db, runtime.metrics, clock=runtime.clock,
                            on_takeover=charge)
        metrics = runtime.metrics
        for name, help_text in METRICS.items():
            metrics.describe(name, "counter", help_text)
        metrics.describe("db_changes_gone_total", "counter",
                         "Change feeds refused (410) because since was older than the changes "
                         "kept (db.changes_retain)")
        metrics.inc("db_changes_gone_total", 0)
        metrics.describe("db_changes_ahead_total", "counter",
                         "Change feeds refused (409) because since was beyond this node's "
                         "newest change id (ids are per node)")
        metrics.inc("db_changes_ahead_total", 0)
        return DbBundle(app, runtime)
