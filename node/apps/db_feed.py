"""Reading the replicated tables beyond single rows: ``?where=`` filters of a query, and the
change feed ``GET /v1/db/{table}/changes`` (NDJSON, resumable with ``?since=``).

The feed is a follow like the others (``node.api.app.follow_rows``): it takes one of the
``api.max_follows`` slots, writes at most ``api.follow_buffer_bytes`` at a time, and wakes on the
database application's commits. Its change ids are ``crdt_changes.change_id`` (storage), written
in the transaction that applies the writes, so they survive restarts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from node.httpkit import ApiError, ApiRoute, follow_rows, follow_stream, int_param
from node.httpkit.openapi import INT64_MAX, Param, RouteDoc, obj
from storage.crdt_changes import StoredChange, change_horizon, newest_change, read_row_changes
from sync.crdt import ColumnType, TableSchema, Value, parse_assignments

if TYPE_CHECKING:
    from node.apps.db_app import DbApplication
    from node.apps.runner import AppHost

__all__ = ["MAX_WHERE", "WHERE_PARAM", "change_json", "changes_route", "parse_where"]

MAX_WHERE = 16
# Changes per read while a feed catches up (the bytes per write are api.follow_buffer_bytes).
READ_CHANGES = 500

WHERE_PARAM = Param(
    "where", "query", {"type": "string", "examples": ["id=k1", "name=alice", "age:=42"]},
    f"COLUMN=VALUE (typed by the column's declared type) or COLUMN:=JSON; repeat for more "
    f"(all must hold, at most {MAX_WHERE}); the column id is the row id; NULL matches an "
    "unwritten cell")


def parse_where(schema: TableSchema, items: list[str]) -> dict[str, Value]:
    """``?where=`` items checked against ``schema`` (400 naming what is wrong)."""
    if len(items) > MAX_WHERE:
        raise ApiError(400, f"at most {MAX_WHERE} where conditions")
    columns = {"id": ColumnType.TEXT, **{c: ColumnType(t) for c, t in schema.columns.items()}}
    try:
        where = parse_assignments(schema.name, columns, items)
    except ValueError as exc:
        raise ApiError(400, f"where: {exc}") from None
    if "id" in where and where["id"] is None:
        raise ApiError(400, "where: id is never null")
    return where


def change_json(change: StoredChange) -> dict[str, Any]:
    return {"change_id": change.change_id, "table": change.table, "kind": change.kind,
            "id": change.entity_id, "row": change.row, "lamport": change.lamport,
            "sender": change.sender, "at": change.at}


def changes_route(db: DbApplication, table_param: Param,
                  require_active: Callable[[], None]) -> ApiRoute:
    async def changes(node: AppHost, request: Request) -> Response:
        require_active()  # 409 naming db.enabled when the database is off
        name = str(request.path_params["table"])
        if name not in db.book:
            known = ", ".join(db.book.tables()) or "none yet"
            raise ApiError(404, f"no replicated table {name!r}; declared: {known}")
        if "where" in request.query_params:
            # A filter on a feed is ambiguous (a row leaving the filter is a change too), and
            # ignoring it silently handed callers every change: refuse it.
            raise ApiError(400, "where is not supported on the change feed: it streams every "
                                "change of the table (filter the lines by their row, or query "
                                f"GET /v1/db/{name}?where=...)")
        if request.query_params.get("since") is None:
            since = await node.store.read(newest_change)  # from now on
        else:
            since = int_param(request, "since", 0)
            horizon = await node.store.read(change_horizon)
            newest = max(await node.store.read(newest_change), horizon)
            if since > newest:
                # Change ids are this node's own count: one from another node, or a typo, would
                # otherwise wait for ids this node has not reached and skip every change up to
                # them without a word.
                node.metrics.inc("db_changes_ahead_total")
                raise ApiError(409, f"since={since} is beyond this node's newest change id "
                                    f"{newest}: change ids are per node (an id seen on another "
                                    "node means nothing here); read the table again, then "
                                    f"follow with since={newest}, or omit since to follow "
                                    "from now")
            if since < horizon:
                node.metrics.inc("db_changes_gone_total")
                raise ApiError(410, f"changes up to {horizon} were pruned (db.changes_retain): "
                                    f"read the table again, then follow with since={horizon} "
                                    "or later")

        async def read(after: int) -> list[StoredChange]:
            return await node.store.read(read_row_changes, name, after, READ_CHANGES)

        def line(change: StoredChange) -> tuple[int, bytes]:
            return change.change_id, (json.dumps(change_json(change), ensure_ascii=False)
                                       + "\n").encode()

        return follow_stream(node, request, follow_rows(request, read, db.change_signal, line,
                                                        since))

    return ApiRoute(
        "GET", "/v1/db/{table}/changes",
        "Stream the table's row changes as NDJSON, resumable from a change id", changes,
        RouteDoc(params=(table_param, Param(
            "since", "query", {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
            "Start after this change id of this node (0: every change kept; omitted: from now "
            "on; beyond the newest: 409)")),
            media="application/x-ndjson", response=CHANGE_SCHEMA,
            errors={400: "where given (the feed has no filter), or since is not an integer",
                    404: "No such replicated table",
                    409: "since is beyond this node's newest change id (ids are per node), "
                         "or the replicated database is off on this node",
                    410: "since is older than the changes kept (db.changes_retain)",
                    429: "api.max_follows streams already open"}))


CHANGE_SCHEMA = obj({
    "change_id": {"type": "integer", "description": "Increases with every change of any "
                  "table, kept across restarts: resume with since=<the last one seen>, on the same "
                  "node (each node numbers its own changes)"},
    "table": {"type": "string"},
    "kind": {"enum": ["upsert", "delete", "reset"], "description": "upsert: the row is visible "
             "with these values (new or changed); delete: it is not any more; reset: the table "
             "was re-derived after a schema change, read it again"},
    "id": {"type": ["string", "null"], "description": "The row id (null for reset)"},
    "row": {"type": ["object", "null"], "description": "upsert: every declared column "
            "(null where unwritten)"},
    "lamport": {"type": "integer", "description": "Lamport time of the write that made it"},
    "sender": {"type": "string", "description": "Peer id of that write's signer"},
    "at": {"type": "integer", "description": "Epoch ms when this node applied it"},
}, description="One line of the stream (application/x-ndjson: one such object per line)")
