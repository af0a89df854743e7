"""``syncnode db``: write and read a node's replicated tables (the Spindexer CRDT).

Values are given as ``COLUMN=VALUE``, parsed by the column's declared type (the node tells its
schemas: ``GET /v1/db``), or as ``COLUMN:=JSON`` for a JSON literal (``name:=null`` clears a
column). Writes answer once the node committed the event and applied it. ``schema`` shows a
table's versions (``GET /v1/db-schemas/TABLE``); ``declare`` publishes a new version (the
owner's node only).
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any
from urllib.parse import quote

from node.cli.common import (
    CliError,
    add_client_options,
    client_for,
    exit_code_for_status,
)
from node.cli.db_watch import cmd_watch, non_negative, positive, show
from node.cli.human import iso_ms

__all__ = ["parse_assignments", "parse_columns", "parse_value", "register"]

_TYPES = ("text", "integer", "real", "boolean")


def _usage(message: str) -> Exception:
    return CliError(message, code=2)


def parse_value(column: str, kind: str, text: str) -> Any:
    """``text`` as a value of the declared type ``kind`` (text, integer, real, boolean)."""
    from sync.crdt import ColumnType, parse_typed

    try:
        return parse_typed(ColumnType(kind), text)
    except ValueError as exc:
        if kind not in _TYPES:
            raise _usage(f"{column} has a type this client does not know: {kind}") from None
        raise _usage(f"{column} is {exc}") from None


def parse_assignments(table: str, columns: dict[str, str], items: list[str]) -> dict[str, Any]:
    """``COLUMN=VALUE`` / ``COLUMN:=JSON`` arguments as a values object, checked against the
    declared ``columns`` (name -> type; the node judges a JSON literal's type)."""
    from sync.crdt import ColumnType
    from sync.crdt import parse_assignments as parse

    for item in items:
        name = item.partition("=")[0].removesuffix(":")
        if name in columns and columns[name] not in _TYPES:
            raise _usage(f"{name} has a type this client does not know: {columns[name]}")
    kinds = {name: ColumnType(columns[name]) for name in sorted(columns)
             if columns[name] in _TYPES}
    try:
        return parse(table, kinds, items, check_json=False)
    except ValueError as exc:
        raise _usage(str(exc)) from None


def _columns(client: Any, table: str) -> dict[str, str]:
    answer = client.get("/v1/db")
    if answer.get("enabled") is False:
        # The node's own words (it names the config key), as for a declaration.
        client.get(f"/v1/db/{quote(table, safe='')}", params={"limit": 1})
    tables = answer["tables"]
    if table not in tables:
        declared = ", ".join(sorted(tables)) or "none yet (`syncnode db declare` one)"
        raise _usage(f"no replicated table {table!r}; declared: {declared}")
    return dict(tables[table]["columns"])


def _write(args: argparse.Namespace, op: str) -> int:
    client = client_for(args)
    body: dict[str, Any] = {"op": op, "id": args.id}
    if op != "delete":
        columns = _columns(client, args.table)
        body["values"] = parse_assignments(args.table, columns, args.values)
        if op == "update" and not body["values"]:
            raise _usage("update needs at least one COLUMN=VALUE")
        if op == "update" and args.pending:
            body["pending"] = True
    elif args.pending:
        body["pending"] = True
    try:
        answer = client.post(f"/v1/db/{quote(args.table, safe='')}", json=body)
    except CliError as exc:
        # The node's hint names the API's body field; this command's is the flag.
        raise CliError(str(exc).replace('"pending": true', "--pending"), code=exc.code) from None
    state = "applied" if answer["applied"] else "committed (not applied yet)"
    print(f"{op} {args.table}/{args.id} {state}: at {iso_ms(answer['lamport'])} (lamport "
          f"{answer['lamport']}), message {answer['message_id']}")
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    client = client_for(args)
    table = quote(args.table, safe="")
    if args.id == "changes":  # GET /v1/db/TABLE/changes is the change feed
        rows = client.get(f"/v1/db/{table}", params={"where": f"id={args.id}"})["rows"]
        if not rows:
            raise CliError(f"GET /v1/db/{args.table}: no row 'changes' in {args.table}",
                           code=exit_code_for_status(404))
        row = rows[0]
    else:
        row = client.get(f"/v1/db/{table}/{quote(args.id, safe='')}")
    if args.json:
        print(json.dumps(row, sort_keys=True, ensure_ascii=False))
        return 0
    width = max(len(k) for k in row)
    for key, value in row.items():
        print(f"{key:<{width}}  {show(value)}")
    return 0


def _cmd_query(args: argparse.Namespace) -> int:
    client = client_for(args)
    path = f"/v1/db/{quote(args.table, safe='')}"
    wanted = args.limit
    params: dict[str, Any] = {"where": args.where or []}
    rows: list[dict[str, Any]] = []
    seen = 0
    while wanted is None or seen < wanted:
        params["limit"] = 1000 if wanted is None else min(1000, wanted - seen)
        page = client.get(path, params=params)
        seen += len(page["rows"])
        if args.json:
            for row in page["rows"]:
                print(json.dumps(row, sort_keys=True, ensure_ascii=False))
        else:
            rows += page["rows"]
        if page["next_after"] is None:
            break
        params["after"] = page["next_after"]
    if not args.json:
        _print_table(list(_columns(client, args.table)), rows)
    return 0


def _print_table(columns: list[str], rows: list[dict[str, Any]]) -> None:
    header = ["id", *columns]  # declared order
    cells = [[show(row.get(c)) for c in header] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    for line in [header, *cells]:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


def _cmd_schema(args: argparse.Namespace) -> int:
    client = client_for(args)
    history = client.get(f"/v1/db-schemas/{quote(args.table, safe='')}")
    if args.json:
        print(json.dumps(history, sort_keys=True))
        return 0
    print(f"table {history['table']}  owner {history['owner']}")
    for version in history["versions"]:
        writers = version["writers"]
        columns = ", ".join(f"{c} {t}" for c, t in version["columns"].items())
        print(f"v{version['version']}  {iso_ms(version['lamport'])}  columns: "
              f"{columns or '(none)'}  writers: "
              f"{'any' if writers is None else ', '.join(writers) or '(none)'}")
    hidden = {c: e for c, e in history["epochs"].items() if e >= 0}
    for column, epoch in hidden.items():
        print(f"column {column}: cells written at or before {iso_ms(epoch)} (lamport {epoch}) "
              "read as NULL")
    return 0


def parse_columns(items: list[str]) -> dict[str, str]:
    """``COLUMN=TYPE`` arguments as a columns object."""
    columns: dict[str, str] = {}
    for item in items:
        name, sep, kind = item.partition("=")
        if not sep or not name or kind not in _TYPES:
            raise _usage(f"expected COLUMN=TYPE with TYPE one of {', '.join(_TYPES)}, "
                         f"got {item!r}")
        if name in columns:
            raise _usage(f"column {name} given twice")
        columns[name] = kind
    return columns


def _cmd_declare(args: argparse.Namespace) -> int:
    client = client_for(args)
    body = {"columns": parse_columns(args.columns),
            "writers": None if args.writer is None else sorted(set(args.writer))}
    answer = client.post(f"/v1/db-schemas/{quote(args.table, safe='')}", json=body)
    state = "applied" if answer["applied"] else "committed (not applied yet)"
    print(f"schema of {args.table} declared, {state}: at {iso_ms(answer['lamport'])} (lamport "
          f"{answer['lamport']}), message {answer['message_id']}")
    return 0


def register(sub: Any) -> None:
    db = sub.add_parser("db", help="write and read the replicated tables (docs/crdt.md)")
    commands = db.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")
    for op, help_text in (
        ("upsert", "create or update a record (creates it if missing)"),
        ("update", "update columns of an existing record (--pending: of one still to come)"),
    ):
        cmd = commands.add_parser(op, help=help_text)
        cmd.add_argument("table", metavar="TABLE")
        cmd.add_argument("id", metavar="ID")
        cmd.add_argument("values", metavar="COLUMN=VALUE", nargs="*",
                         help="typed by the column's declared type; COLUMN:=JSON for a JSON "
                              "literal (COLUMN:=null sets NULL)")
        if op == "update":
            cmd.add_argument("--pending", action="store_true",
                             help="accept an update of a record this node does not have yet: "
                                  "it waits until the record arrives (else: an error)")
        add_client_options(cmd)
        cmd.set_defaults(func=functools.partial(_write, op=op))
    delete = commands.add_parser("delete", help="delete a record (a tombstone); an id this "
                                                "node never saw is an error unless --pending")
    delete.add_argument("table", metavar="TABLE")
    delete.add_argument("id", metavar="ID")
    delete.add_argument("--pending", action="store_true",
                        help="delete a record this node has not seen yet (it wins when the "
                             "record arrives from a peer)")
    add_client_options(delete)
    delete.set_defaults(func=functools.partial(_write, op="delete"))
    get = commands.add_parser("get", help="show one row")
    get.add_argument("table", metavar="TABLE")
    get.add_argument("id", metavar="ID")
    get.add_argument("--json", action="store_true", help="print the row as one JSON object")
    add_client_options(get)
    get.set_defaults(func=_cmd_get)
    query = commands.add_parser("query", help="list a table's rows in id order")
    query.add_argument("table", metavar="TABLE")
    query.add_argument("--json", action="store_true", help="one JSON object per row")
    query.add_argument("--limit", type=positive, metavar="N", help="at most N rows")
    query.add_argument("--where", action="append", metavar="COLUMN=VALUE",
                       help="only rows whose COLUMN equals VALUE (typed by the column; "
                            "COLUMN:=JSON for a JSON literal, :=null for unwritten); repeat: "
                            "all must hold")
    add_client_options(query)
    query.set_defaults(func=_cmd_query)
    watch = commands.add_parser(
        "watch", help="print a table's row changes as they happen (resumes after a restart)")
    watch.add_argument("table", metavar="TABLE")
    watch.add_argument("--since", type=non_negative, metavar="ID",
                       help="first print the changes after this change id (0: every one kept)")
    watch.add_argument("--json", action="store_true", help="one JSON object per change")
    watch.add_argument("--count", type=positive, metavar="N", help="stop after N changes")
    add_client_options(watch)
    watch.set_defaults(func=cmd_watch)
    schema = commands.add_parser("schema", help="show a table's owner and schema versions")
    schema.add_argument("table", metavar="TABLE")
    schema.add_argument("--json", action="store_true", help="print the history as JSON")
    add_client_options(schema)
    schema.set_defaults(func=_cmd_schema)
    declare = commands.add_parser(
        "declare", help="publish a new schema version of a table (its owner's node only)")
    declare.add_argument("table", metavar="TABLE")
    declare.add_argument("columns", metavar="COLUMN=TYPE", nargs="*",
                         help="every column of the new version (text, integer, real, boolean)")
    declare.add_argument("--writer", action="append", metavar="PEER_ID",
                         help="a peer allowed to write (repeat); omitted: anyone may write")
    add_client_options(declare)
    declare.set_defaults(func=_cmd_declare)
