"""``syncnode ui``: a one-time sign-in link to the node's status page (``GET /``).

The link holds a nonce, not the API token: it works once, within ``ui.link_ttl_s``, and leaves
an HttpOnly session cookie and ``/`` in the browser, nothing else (docs/ops/README.md).
"""

from __future__ import annotations

import argparse
import webbrowser
from typing import Any

from node.cli.common import add_client_options, client_for, print_json

__all__ = ["register"]


def _cmd_ui(args: argparse.Namespace) -> int:
    answer = client_for(args).post("/v1/ui/links")
    if args.json:
        print_json(answer)
        return 0
    print(f"status page (a one-time link, good for {answer['expires_in_s']:g} s):")
    print(answer["url"], flush=True)
    if args.open:
        webbrowser.open(answer["url"])
    return 0


def register(sub: Any) -> None:
    ui = sub.add_parser("ui", help="print a one-time sign-in link to the node's status page")
    ui.add_argument("--open", action="store_true", help="also open it in the default browser")
    ui.add_argument("--json", action="store_true", help='print {"url", "expires_in_s"}')
    add_client_options(ui)
    ui.set_defaults(func=_cmd_ui)
