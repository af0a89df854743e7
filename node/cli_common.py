"""What every ``syncnode`` client command shares: errors, exit codes, the API client, options.

Kept apart from ``node.cli`` so that the ``cli_*`` command modules import it without importing
``node.cli`` (which imports them to register their commands). Stdlib only, and nothing heavy at
import time: people run these commands in loops (see scripts/bench/cli_bench.py).

Exit codes, one rule for every command (README "Exit codes"):

* 0: done.
* 1 (``EXIT_FAILED``): the request was valid but could not be carried out: no node answering,
  data dir or port in use, not found (HTTP 404), conflict (409), a failure on the node (5xx),
  a failed job.
* 2 (``EXIT_USAGE``): the request itself is wrong and nothing was attempted: bad arguments,
  a bad config or input file, or the node rejected the request as malformed (HTTP 400, 401,
  403, 405, 413, 415, 422).
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

if TYPE_CHECKING:
    from node.config import Config

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "ApiClient",
    "CliError",
    "add_client_options",
    "client_for",
    "config_from",
    "exit_code_for_status",
    "lazy_command",
    "parse_api_url",
    "print_json",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
_USAGE_STATUSES = frozenset({400, 401, 403, 405, 413, 415, 422})


def exit_code_for_status(status: int) -> int:
    """The exit code for an HTTP error answer from the node (see the module docstring)."""
    return EXIT_USAGE if status in _USAGE_STATUSES else EXIT_FAILED


class CliError(Exception):
    """A user-facing failure: printed as one ``error:`` line, exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        self.code = code
        super().__init__(" ".join(message.split("\n")))


def config_from(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Config:
    from node.config import ConfigError, load_config

    try:
        return load_config(getattr(args, "config", None), overrides=overrides)
    except ConfigError as exc:
        raise CliError(str(exc), code=EXIT_USAGE) from None


def parse_api_url(value: str) -> str:
    """``HOST:PORT`` or ``http(s)://HOST:PORT`` as a base URL; CliError (usage) otherwise."""
    url = value if "://" in value else f"http://{value}"
    problem = None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        problem = str(exc)
    else:
        if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
            problem = "expected HOST:PORT or http://HOST:PORT"
        elif parts.path.strip("/") or parts.query or parts.fragment:
            problem = "no path, query or fragment allowed"
    if problem:
        raise CliError(f"--api {value!r}: {problem}", code=EXIT_USAGE)
    return url.rstrip("/")


class ApiClient:
    """Synchronous JSON client of a node's local API with one-line errors.

    Built on ``http.client``: it talks to the URL given and nothing else, so ``HTTP_PROXY``
    and friends never reroute a loopback call (and it imports in a few milliseconds).
    """

    def __init__(self, base_url: str, timeout: float = 30.0,
                 headers: Mapping[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port
        self.timeout = timeout
        self.headers = {"Accept": "application/json", **(headers or {})}

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout)

    def _send(self, method: str, path: str, json_body: Any, params: Mapping[str, Any] | None,
              timeout: float | None) -> tuple[http.client.HTTPConnection,
                                              http.client.HTTPResponse]:
        target = path + ("?" + urlencode(params) if params else "")
        headers = dict(self.headers)
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        conn = self._connection(timeout)
        try:
            conn.request(method, target, body=body, headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            reason = "timed out" if isinstance(exc, socket.timeout) else exc.__class__.__name__
            raise CliError(
                f"no node answering at {self.base_url} ({reason}); "
                "is `syncnode run` running, and is --api right?"
            ) from None
        if response.status >= 400:
            raw = response.read()
            conn.close()
            raise CliError(f"{method} {path}: HTTP {response.status}: {_error_text(raw)}",
                           code=exit_code_for_status(response.status))
        return conn, response

    def request(self, method: str, path: str, *, json: Any = None,
                params: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        conn, response = self._send(method, path, json, params, timeout or self.timeout)
        try:
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise CliError(f"{method} {path}: connection lost ({exc})") from None
        finally:
            conn.close()
        if (response.getheader("content-type") or "").startswith("application/json"):
            return _json_loads(raw, method, path)
        return raw.decode("utf-8", "replace")

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    def stream_lines(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[Any]:
        """The JSON objects of an NDJSON stream, until the node closes it."""
        conn, response = self._send("GET", path, None, params, None)
        try:
            while True:
                try:
                    line = response.readline()
                except (OSError, http.client.HTTPException) as exc:
                    raise CliError(f"follow interrupted: {exc}") from None
                if not line:
                    return
                if line.strip():
                    yield _json_loads(line, "GET", path)
        finally:
            conn.close()


def _json_loads(raw: bytes, method: str, path: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise CliError(f"{method} {path}: the node answered with invalid JSON") from None


def _error_text(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(value, dict) and "error" in value:
        return str(value["error"])
    return text.strip()[:500]


def client_for(args: argparse.Namespace) -> ApiClient:
    return ApiClient(parse_api_url(args.api or config_from(args).api.listen))


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api", metavar="URL", help="node API (default: api.listen of --config)")
    parser.add_argument("--config", metavar="FILE", help="config file to read the API address from")


def lazy_command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command function that imports ``module`` only when the command runs."""

    def run(args: argparse.Namespace) -> int:
        code: int = getattr(importlib.import_module(module), name)(args)
        return code

    return run


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))
