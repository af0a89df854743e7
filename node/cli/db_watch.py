"""``syncnode db watch``: a table's row changes as they happen (``GET /v1/db/TABLE/changes``),
resumed after the last change printed whenever the connection is lost (a node restart)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any
from urllib.parse import quote

from node.cli.common import EXIT_FAILED, CliError, client_for

__all__ = ["cmd_watch", "non_negative", "positive", "show"]


def show(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    return json.dumps(value)


def non_negative(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def positive(text: str) -> int:
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a whole number >= 1, got 0")
    return value


def _change_line(change: dict[str, Any]) -> str:
    head = f"#{change['change_id']}  {change['kind']:<6}  "
    if change["kind"] == "reset":
        return head + f"{change['table']} was re-derived (a schema change): read it again"
    values = "" if change["row"] is None else "  " + "  ".join(
        f"{k}={show(v)}" for k, v in change["row"].items())
    return head + f"{change['table']}/{change['id']}{values}"


def cmd_watch(args: argparse.Namespace) -> int:
    """Print the table's changes; after a lost connection (a node restart), reconnect and
    resume after the last change printed, so none is missed or printed twice."""
    client = client_for(args)
    path = f"/v1/db/{quote(args.table, safe='')}/changes"
    since: int | None = args.since
    printed = 0
    delay = 0.5
    while args.count is None or printed < args.count:
        try:
            for change in client.stream_lines(path, {} if since is None else {"since": since}):
                print(json.dumps(change, ensure_ascii=False) if args.json
                      else _change_line(change), flush=True)
                since = int(change["change_id"])
                printed += 1
                delay = 0.5
                if args.count is not None and printed >= args.count:
                    return 0
        except CliError as exc:
            if exc.code != EXIT_FAILED or "HTTP" in str(exc):
                raise  # the node answered: a bad table or since is not a lost connection
            print(f"watch: {exc}; reconnecting", file=sys.stderr, flush=True)
        time.sleep(delay)
        delay = min(delay * 2, 5.0)
    return 0
