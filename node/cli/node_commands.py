"""Client commands about the node itself: status, id, join, peers, publish, log.

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
    add_client_options,
    client_for,
    config_from,
    lazy_command,
    print_json,
)

__all__ = ["parse_since", "register"]

_PAGE = 10_000
MAX_PUBLISH_BYTES = 512 * 1024


# -- status and id -----------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace) -> int:
    status = client_for(args).get("/v1/status")
    if args.json:
        print_json(status)
        return 0
    width = max(len(k) for k in status)
    for key, value in status.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        print(f"{key:<{width}}  {shown}")
    return 0


def _cmd_id(args: argparse.Namespace) -> int:
    if args.offline:
        peer_id, addrs = _offline_id(args.data_dir or config_from(args).node.data_dir), []
    else:
        status = client_for(args).get("/v1/status")
        peer_id, addrs = status["peer_id"], status.get("listen_addrs", [])
    if args.json:
        print_json({"peer_id": peer_id, "addresses": addrs})
        return 0
    print(peer_id)
    for addr in addrs:
        print(addr)
    return 0


def _offline_id(data_dir: str) -> str:
    from pathlib import Path

    from node.p2p.identity import KEY_FILE, load_identity
    from sync.identity import peer_id_of

    path = Path(data_dir).expanduser() / KEY_FILE
    if not path.is_file():
        raise CliError(f"no identity in {data_dir} ({path} missing): a node creates it on "
                       "its first `syncnode run`")
    try:
        return peer_id_of(load_identity(path))
    except (OSError, ValueError) as exc:
        raise CliError(f"{path}: unreadable identity key ({exc})") from None


# -- peers -------------------------------------------------------------------------------------


def _cmd_join(args: argparse.Namespace) -> int:
    from node.config_checks import multiaddr_problem

    if problem := multiaddr_problem(args.multiaddr, need_peer=True, allow_dns=True):
        raise CliError(problem, code=EXIT_USAGE)
    answer = client_for(args).post("/v1/peers", json={"multiaddr": args.multiaddr})
    print(f"joined {answer['peer_id']}")
    return 0


def _cmd_peers(args: argparse.Namespace) -> int:
    answer = client_for(args).get("/v1/peers")
    if args.json:
        print_json(answer)
        return 0
    for peer in answer["connected"]:
        print(f"{peer['peer_id']}  {peer['direction']:<8}  {peer['address'] or '-'}")
    offline = [p for p in answer["known"] if p not in {c["peer_id"] for c in answer["connected"]}]
    for peer_id in offline:
        print(f"{peer_id}  offline   (known, redialling)")
    if not answer["connected"] and not offline:
        print("no peers")
    return 0


def _cmd_forget(args: argparse.Namespace) -> int:
    from node.config_checks import peer_id_problem

    if problem := peer_id_problem(args.peer_id):
        raise CliError(problem, code=EXIT_USAGE)
    client_for(args).delete(f"/v1/peers/{quote(args.peer_id, safe='')}")
    print(f"forgot {args.peer_id}: no more redials; it may still connect to us")
    return 0


# -- events ------------------------------------------------------------------------------------


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


def _cmd_publish(args: argparse.Namespace) -> int:
    import secrets

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
    return f"{event['lamport']}  {event['sender'][-8:]}  {event['message_id'][:12]}  {content}"


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


def _cmd_log(args: argparse.Namespace) -> int:
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


# -- parser ------------------------------------------------------------------------------------


def register(sub: Any) -> None:
    status = sub.add_parser("status", help="show a running node's status")
    add_client_options(status)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--watch", action="store_true",
                        help="redraw rates (events in/out, Recon sessions, peers, lag) like top")
    status.add_argument("--interval", type=float, default=2.0, metavar="S",
                        help="--watch refresh interval in seconds (default 2)")
    status.add_argument("--count", type=int, metavar="N",
                        help="--watch: stop after N refreshes (default: until Ctrl-C)")
    status.set_defaults(func=_dispatch_status)

    id_cmd = sub.add_parser("id", help="print the node's peer id and full listen multiaddrs")
    add_client_options(id_cmd)
    id_cmd.add_argument("--offline", action="store_true",
                        help="read the identity key from the data dir (--data-dir, or "
                             "node.data_dir of --config) instead of asking the running node")
    id_cmd.add_argument("--json", action="store_true", help="print JSON")
    id_cmd.set_defaults(func=_cmd_id)

    join = sub.add_parser("join", help="dial a peer at an address, check its peer id, "
                                       "and remember the address")
    join.add_argument("multiaddr", metavar="MULTIADDR",
                      help="/ip4|ip6|dns4|dns6/HOST/tcp/PORT/p2p/PEER_ID")
    add_client_options(join)
    join.set_defaults(func=_cmd_join)

    peers = sub.add_parser("peers", help="list connected and known peers; `peers forget`")
    add_client_options(peers)
    peers.add_argument("--json", action="store_true", help="print JSON")
    peers.set_defaults(func=_cmd_peers)
    peers_sub = peers.add_subparsers(dest="peers_command", metavar="ACTION")
    forget = peers_sub.add_parser("forget", help="stop redialling a known peer, drop its "
                                                 "stored address and disconnect it")
    forget.add_argument("peer_id", metavar="PEER_ID")
    add_client_options(forget)
    forget.set_defaults(func=_cmd_forget)

    publish = sub.add_parser("publish", help="publish an event; prints its message id")
    publish.add_argument("channel", metavar="CHANNEL")
    publish.add_argument("message", metavar="MESSAGE",
                         help="the content, or - to read it from stdin (one trailing newline is "
                              "stripped; bytes that are not UTF-8 are sent as binary)")
    add_client_options(publish)
    publish.set_defaults(func=_cmd_publish)

    log_cmd = sub.add_parser("log", help="print a channel's events in log order")
    log_cmd.add_argument("channel", metavar="CHANNEL")
    log_cmd.add_argument("--json", action="store_true",
                         help="one JSON object per line: message_id, sender, lamport, content "
                         "(null if not UTF-8, with content_b64 holding the bytes)")
    log_cmd.add_argument("--limit", type=int, metavar="N", help="only the newest N events")
    log_cmd.add_argument("--since", metavar="WHEN",
                         help="only events from WHEN on: 10m, 2h, 1d, an ISO time or epoch ms")
    log_cmd.add_argument("--follow", action="store_true", help="keep printing new events")
    add_client_options(log_cmd)
    log_cmd.set_defaults(func=_cmd_log)


_watch = lazy_command("node.cli.watch", "watch_status")


def _dispatch_status(args: argparse.Namespace) -> int:
    return _watch(args) if args.watch else _cmd_status(args)
