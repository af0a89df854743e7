"""``syncnode publish`` and ``syncnode log``: events in and out of a running node.

Stdlib and ``node.cli.common`` only: these are the commands people script in loops.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from typing import Any
from urllib.parse import quote

from node.cli.common import (
    EXIT_USAGE,
    ApiClient,
    CliError,
    client_for,
)
from node.cli.human import iso_ms

__all__ = ["cmd_log", "cmd_publish", "parse_since"]

_PAGE = 10_000
MAX_PUBLISH_BYTES = 512 * 1024


def _read_message(arg: str) -> dict[str, str]:
    """The publish body: the argument, or stdin for ``-`` (one trailing newline stripped)."""
    if arg != "-":
        return {"content": arg}
    data = sys.stdin.buffer.read(MAX_PUBLISH_BYTES + 2)
    # `echo hi | syncnode publish ch -` means "hi", as with shell command substitution.
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if len(data) > MAX_PUBLISH_BYTES:
        raise CliError(f"stdin holds over {MAX_PUBLISH_BYTES} bytes (the largest event)",
                       code=EXIT_USAGE)
    if not data:
        raise CliError("nothing on stdin to publish", code=EXIT_USAGE)
    try:
        return {"content": data.decode("utf-8")}
    except UnicodeDecodeError:
        import base64

        return {"content_b64": base64.b64encode(data).decode("ascii")}


def _item(line: bytes) -> dict[str, str]:
    try:
        return {"content": line.decode("utf-8")}
    except UnicodeDecodeError:
        import base64

        return {"content_b64": base64.b64encode(line).decode("ascii")}


def _read_lines(source: str) -> list[dict[str, str]]:
    """One event per line of ``source`` (a file, or - for stdin), all checked before any is
    published: an empty or oversized line is an error naming it, not a skipped event."""
    if source == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CliError(f"cannot read {source}: {exc.strerror}", code=EXIT_USAGE) from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    items = []
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix(b"\r")
        if not line:
            raise CliError(f"line {number} is empty (an event needs content)", code=EXIT_USAGE)
        if len(line) > MAX_PUBLISH_BYTES:
            raise CliError(f"line {number} holds over {MAX_PUBLISH_BYTES} bytes (the largest "
                           "event)", code=EXIT_USAGE)
        items.append(_item(line))
    if not items:
        raise CliError("no lines to publish", code=EXIT_USAGE)
    return items


def _publish_lines(args: argparse.Namespace) -> int:
    # Batch bodies, each committed as one transaction; printed as each batch is answered.
    # Not retried on a broken connection (a batch takes no Idempotency-Key): the ids printed
    # are the events published; the error names the batch whose fate is unknown.
    items = _read_lines(args.lines)
    client = client_for(args)
    path = f"/v1/channels/{quote(args.channel, safe='')}/events"
    for start in range(0, len(items), args.batch):
        try:
            answer = client.post(path, json={"events": items[start:start + args.batch]})
        except CliError as exc:
            raise CliError(f"lines {start + 1}..: {exc}", code=exc.code) from None
        for event in answer["events"]:
            print(event["message_id"])
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    import secrets

    if args.lines is not None:
        if args.message is not None:
            raise CliError("give MESSAGE or --lines, not both", code=EXIT_USAGE)
        return _publish_lines(args)
    if args.message is None:
        raise CliError("nothing to publish: give MESSAGE, - (stdin) or --lines FILE",
                       code=EXIT_USAGE)
    body = _read_message(args.message)
    # One key per invocation: the client's retries after a broken connection cannot publish twice.
    answer = client_for(args).post(f"/v1/channels/{quote(args.channel, safe='')}/events",
                                   json=body, idempotency_key=secrets.token_hex(16))
    print(answer["message_id"])
    return 0


def _event_line(event: dict[str, Any], as_json: bool) -> str:
    if as_json:
        keys = ("message_id", "sender", "lamport", "content")
        line = {k: event[k] for k in keys}
        if event["content"] is None:  # not UTF-8: the bytes, base64, rather than nothing
            line["content_b64"] = event["content_b64"]
        return json.dumps(line)
    content = event["content"] if event["content"] is not None else f"<{event['content_b64']}>"
    # One line per event, whatever the content holds.
    content = content.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    # The Lamport value is epoch milliseconds (SDS): shown as the UTC time it stands for.
    return (f"{iso_ms(event['lamport'])}  {event['sender'][-8:]}  {event['message_id'][:12]}  "
            f"{content}")


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_since(text: str, now_ms: int) -> int:
    """``--since``: a duration ago (``90s``, ``10m``, ``2h``, ``1d``), an ISO 8601 time, or
    epoch milliseconds; the Lamport time (epoch ms) from which events are shown."""
    if match := _DURATION.fullmatch(text.strip()):
        return now_ms - int(match[1]) * _UNIT_MS[match[2]]
    if text.isdigit():
        return int(text)
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--since {text!r}: expected 10m, 2h, 1d, an ISO time "
                       "(2026-01-31T12:00:00Z) or epoch milliseconds", code=EXIT_USAGE) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def cmd_log(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise CliError("--limit must be >= 1", code=EXIT_USAGE)
    since = parse_since(args.since, int(time.time() * 1000)) if args.since else None
    client = client_for(args)
    path = f"/v1/channels/{quote(args.channel, safe='')}/events"
    # Taken first so that nothing committed while the log prints is missed by --follow.
    follow_from = _latest_seq(client, path) if args.follow else 0
    params: dict[str, Any] = {"limit": _PAGE}
    if since is not None:
        # (lamport, id) > (since - 1, "~"): every id sorts below "~", so lamport >= since.
        params.update(after_lamport=max(since - 1, 0), after_id="~")
    # --limit N keeps the newest N (like `tail -n`), still printed in log order.
    shown: collections.deque[str] | None = collections.deque(maxlen=args.limit) \
        if args.limit else None
    while True:
        answer = client.get(path, params=params)
        for event in answer["events"]:
            line = _event_line(event, args.json)
            if shown is None:
                print(line, flush=True)
            else:
                shown.append(line)
        # A page ends at its row limit or at the node's api.page_max_bytes: "more" says which.
        if not answer.get("more"):
            break
        params.update(answer["next"])
    for line in shown or ():
        print(line)
    if not args.follow:
        return 0
    # Follow in storage order from now on: late arrivals with old timestamps are shown too.
    follow = f"/v1/channels/{quote(args.channel, safe='')}/follow"
    for event in client.stream_lines(follow, params={"after": follow_from}):
        print(_event_line(event, args.json), flush=True)
    return 0


def _latest_seq(client: ApiClient, path: str) -> int:
    cursor = 0
    while True:
        answer = client.get(path, params={"order": "seq", "after": cursor, "limit": _PAGE})
        if answer["events"]:
            cursor = answer["events"][-1]["seq"]
        if not answer.get("more"):
            return int(cursor)
