"""The ``syncnode`` command: ``run`` starts a node; the other subcommands talk to its local API."""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import trio

from node import cli_blocks, cli_db, cli_records, cli_snapshot
from node.cli_common import (
    ApiClient,
    CliError,
    add_client_options,
    client_for,
    config_from,
    print_json,
)
from node.config import Config
from node.logs import configure_logging
from node.runtime import package_version

__all__ = ["ApiClient", "CliError", "build_parser", "main"]

EXTENSIONS: list[Callable[[Any], None]] = [
    cli_records.register,
    cli_blocks.register,
    cli_db.register,
    cli_snapshot.register,
]


# -- run ---------------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.data_dir:
        overrides["node.data_dir"] = args.data_dir
    if args.api:
        overrides["api.listen"] = args.api
    if args.listen:
        overrides["p2p.listen"] = args.listen
    if args.bootstrap:
        overrides["p2p.bootstrap"] = args.bootstrap
    config = config_from(args, overrides)
    configure_logging(config.node.log_level, config.node.log_format)
    return trio.run(_run_node, config)


async def _run_node(config: Config) -> int:
    from node.daemon import serve  # imported late: keeps client commands free of libp2p

    shutdown = trio.Event()

    async def watch_signals() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                shutdown.set()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_signals)
        info = await nursery.start(serve, config, shutdown)
        print(f"syncnode {package_version()} running", flush=True)
        print(f"peer id:   {info.peer_id}")
        for addr in info.listen_addrs:
            print(f"listening: {addr}")
        print(f"api:       {info.api_url}", flush=True)
        await shutdown.wait()
        nursery.cancel_scope.cancel()
    print("stopped", flush=True)
    return 0


# -- status ------------------------------------------------------------------------------------


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


# -- peer group and events ----------------------------------------------------------------------


def _cmd_join(args: argparse.Namespace) -> int:
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


def _cmd_publish(args: argparse.Namespace) -> int:
    message = sys.stdin.read() if args.message == "-" else args.message
    # One key per invocation: the client's retries after a broken connection cannot publish twice.
    answer = client_for(args).post(f"/v1/channels/{args.channel}/events",
                                   json={"content": message}, idempotency_key=secrets.token_hex(16))
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


def _cmd_log(args: argparse.Namespace) -> int:
    client = client_for(args)
    # Taken first so that nothing committed while the log prints is missed by --follow.
    follow_from = _latest_seq(client, args.channel) if args.follow else 0
    params: dict[str, Any] = {"limit": 10_000}
    while True:
        answer = client.get(f"/v1/channels/{args.channel}/events", params=params)
        for event in answer["events"]:
            print(_event_line(event, args.json), flush=True)
        if not answer.get("more"):
            break
        params.update(answer["next"])
    if not args.follow:
        return 0
    # Follow in storage order from now on: late arrivals with old timestamps are shown too.
    url = f"/v1/channels/{args.channel}/follow"
    try:
        with client.http.stream("GET", url, params={"after": follow_from}, timeout=None) as stream:
            for line in stream.iter_lines():
                if line:
                    print(_event_line(json.loads(line), args.json), flush=True)
    except httpx.TransportError as exc:
        raise CliError(f"follow interrupted: {exc}") from None
    return 0


def _latest_seq(client: ApiClient, channel: str) -> int:
    cursor = 0
    while True:
        answer = client.get(f"/v1/channels/{channel}/events",
                            params={"order": "seq", "after": cursor, "limit": 10_000})
        if answer["events"]:
            cursor = answer["events"][-1]["seq"]
        if not answer.get("more"):
            return cursor


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="syncnode", description="Peer-to-peer sync daemon for append-only event logs."
    )
    parser.add_argument("--version", action="version", version=f"syncnode {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a node in the foreground")
    run.add_argument("--config", metavar="FILE", help="TOML config (see config.example.toml)")
    run.add_argument("--data-dir", metavar="DIR", help="override node.data_dir")
    run.add_argument("--api", metavar="HOST:PORT", help="override api.listen")
    run.add_argument("--listen", metavar="MULTIADDR", action="append", help="override p2p.listen")
    run.add_argument("--bootstrap", metavar="MULTIADDR", action="append",
                     help="peer to dial at start-up (repeatable)")
    run.set_defaults(func=_cmd_run)

    status = sub.add_parser("status", help="show a running node's status")
    add_client_options(status)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=_cmd_status)

    join = sub.add_parser("join", help="connect a running node to a peer and remember it")
    join.add_argument("multiaddr", metavar="MULTIADDR", help="/ip4/HOST/tcp/PORT/p2p/PEER_ID")
    add_client_options(join)
    join.set_defaults(func=_cmd_join)

    peers = sub.add_parser("peers", help="list connected and known peers")
    add_client_options(peers)
    peers.add_argument("--json", action="store_true", help="print JSON")
    peers.set_defaults(func=_cmd_peers)

    publish = sub.add_parser("publish", help="publish an event; prints its message id")
    publish.add_argument("channel", metavar="CHANNEL")
    publish.add_argument("message", metavar="MESSAGE", help="the content, or - for stdin")
    add_client_options(publish)
    publish.set_defaults(func=_cmd_publish)

    log_cmd = sub.add_parser("log", help="print a channel's events in log order")
    log_cmd.add_argument("channel", metavar="CHANNEL")
    log_cmd.add_argument("--json", action="store_true",
                         help="one JSON object per line: message_id, sender, lamport, content "
                         "(null if not UTF-8, with content_b64 holding the bytes)")
    log_cmd.add_argument("--follow", action="store_true", help="keep printing new events")
    add_client_options(log_cmd)
    log_cmd.set_defaults(func=_cmd_log)

    for register in EXTENSIONS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
