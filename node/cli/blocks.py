"""``syncnode blocks``: publish, inspect and follow a node's block stream (Cardinal Streams).

``publish`` reads a JSONL file of block payloads (docs/cardinal.md, "Payloads and the JSONL
format"), checks every line locally (errors name the line), then sends the payloads to the node,
which produces the Cardinal messages and publishes them. The other commands read the node's
blocks tables through its API.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from node.cli.common import CliError, add_client_options, client_for, print_json
from sync.errors import RemoteProtocolError

__all__ = ["register"]


# Requests stay well under the API's body limit (16 MiB) and block count (1000).
_CHUNK_BLOCKS = 200
_CHUNK_BYTES = 4 * 1024 * 1024
# The node answers once every message is signed and committed (~2,000 events/s per core).
_PUBLISH_TIMEOUT_S = 600.0


def _chunks(path: str) -> Iterator[list[dict[str, Any]]]:
    try:
        handle = sys.stdin if path == "-" else Path(path).open(encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise CliError(f"{path}: cannot read ({exc.strerror or exc})", code=2) from None
    from sync.cardinal import iter_payloads_jsonl, payload_to_json

    chunk: list[dict[str, Any]] = []
    size = 0
    try:
        for payload in iter_payloads_jsonl(handle, source=path):
            obj = payload_to_json(payload)
            chunk.append(obj)
            size += len(json.dumps(obj))
            if len(chunk) >= _CHUNK_BLOCKS or size >= _CHUNK_BYTES:
                yield chunk
                chunk, size = [], 0
    except RemoteProtocolError as exc:
        raise CliError(f"{path}: {exc.reason}", code=2) from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text", code=2) from None
    finally:
        if handle is not sys.stdin:
            handle.close()
    if chunk:
        yield chunk


def _cmd_publish(args: argparse.Namespace) -> int:
    # Validate the whole file before publishing anything: a bad line must not leave half a
    # file published.
    chunks = list(_chunks(args.file))
    if not chunks:
        raise CliError(f"{args.file}: no block payloads", code=2)
    client = client_for(args)
    blocks = messages = 0
    if args.reorg_ancestor:
        if args.ancestor_number is None:
            raise CliError("--reorg-ancestor needs --ancestor-number", code=2)
        payloads = [obj for chunk in chunks for obj in chunk]
        answer = client.post("/v1/blocks/reorg", json={
            "ancestor": args.reorg_ancestor, "ancestor_number": args.ancestor_number,
            "blocks": payloads}, timeout=_PUBLISH_TIMEOUT_S)
        blocks, messages = answer["blocks"], answer["messages"]
    else:
        for chunk in chunks:
            answer = client.post("/v1/blocks", json={"blocks": chunk}, timeout=_PUBLISH_TIMEOUT_S)
            blocks += answer["blocks"]
            messages += answer["messages"]
    print(f"published {blocks} blocks as {messages} messages")
    return 0


def _cmd_head(args: argparse.Namespace) -> int:
    head = client_for(args).get("/v1/blocks/head")
    if args.json:
        print_json(head)
    else:
        print(f"{head['number']}  {head['hash']}  weight {head['weight']}")
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    block = client_for(args).get(f"/v1/blocks/{args.ref}")
    if args.json:
        print_json(block)
        return 0
    payload = block["payload"]
    print(f"number     {block['number']}")
    print(f"hash       {block['hash']}")
    print(f"parent     {block['parent']}")
    print(f"weight     {block['weight']}")
    print(f"canonical  {'yes' if block['canonical'] else 'no (reverted)'}")
    print(f"updates    {len(payload['updates'])}")
    print(f"deletes    {len(payload['deletes'])}")
    print(f"sub        {len(payload.get('sub_batches', []))}")
    return 0


def _change_line(change: dict[str, Any], as_json: bool) -> str:
    if as_json:
        return json.dumps(change)
    return f"{change['kind']:<8}  {change['number']}  {change['hash']}"


def _cmd_follow(args: argparse.Namespace) -> int:
    client = client_for(args)
    params = {"after": 0} if args.from_start else {}
    for change in client.stream_lines("/v1/blocks/follow", params=params):
        print(_change_line(change, args.json), flush=True)
    return 0


def register(subparsers: Any) -> None:
    blocks = subparsers.add_parser("blocks", help="block streams: publish, head, get, follow")
    sub = blocks.add_subparsers(dest="blocks_command", required=True, metavar="SUBCOMMAND")

    publish = sub.add_parser(
        "publish", help="publish block payloads from a JSONL file (format: docs/cardinal.md)")
    publish.add_argument("file", metavar="FILE.jsonl", help="one block payload per line, or -")
    publish.add_argument("--reorg-ancestor", metavar="HASH",
                         help="publish the blocks as a deep reorg back to this ancestor")
    publish.add_argument("--ancestor-number", metavar="N", type=int,
                         help="number of the reorg ancestor")
    add_client_options(publish)
    publish.set_defaults(func=_cmd_publish)

    head = sub.add_parser("head", help="show the canonical head")
    head.add_argument("--json", action="store_true", help="print JSON")
    add_client_options(head)
    head.set_defaults(func=_cmd_head)

    get = sub.add_parser("get", help="show a block by number (canonical) or hash")
    get.add_argument("ref", metavar="NUMBER|HASH")
    get.add_argument("--json", action="store_true", help="print JSON, with the payload")
    add_client_options(get)
    get.set_defaults(func=_cmd_get)

    follow = sub.add_parser("follow", help="print applied and reverted blocks as they happen")
    follow.add_argument("--json", action="store_true", help="one JSON object per line")
    follow.add_argument("--from-start", action="store_true",
                        help="first print every change this node recorded")
    add_client_options(follow)
    follow.set_defaults(func=_cmd_follow)
