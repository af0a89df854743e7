"""What every ``syncnode`` client command shares: errors, exit codes, the API client, options.

Kept apart from ``node.cli.main`` so that the ``cli_*`` command modules import it without importing
``node.cli.main`` (which imports them to register their commands). Stdlib only, and nothing heavy at
import time: people run these commands in loops (see scripts/bench/cli_bench.py).

Exit codes, one rule for every command (README "Exit codes"):

* 0: done.
* 1 (``EXIT_FAILED``): the request was well-formed but could not be carried out: no node
  answering, data dir or port in use, refused (HTTP 401/403: token), not found (404),
  conflict (409), a failure on the node (5xx), a failed job.
* 2 (``EXIT_USAGE``): the request itself is wrong and nothing was attempted: bad arguments,
  a bad config or input file, or the node rejected the request as malformed (HTTP 400, 405,
  413, 415, 422).
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from node.datadir.api_address import API_URL_FILE, read_api_url
from node.datadir.api_token import TOKEN_ENV, TOKEN_FILE, read_token
from node.datadir.lock import stale_holder

if TYPE_CHECKING:
    from node.config.settings import Config

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "ApiClient",
    "CliError",
    "add_client_options",
    "api_url_for",
    "client_for",
    "config_from",
    "exit_code_for_status",
    "lazy_command",
    "parse_api_url",
    "print_json",
    "token_for",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
_USAGE_STATUSES = frozenset({400, 405, 413, 415, 422})


def exit_code_for_status(status: int) -> int:
    """The exit code for an HTTP error answer from the node (see the module docstring)."""
    return EXIT_USAGE if status in _USAGE_STATUSES else EXIT_FAILED


class CliError(Exception):
    """A user-facing failure: printed as one ``error:`` line, exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        self.code = code
        super().__init__(" ".join(message.split("\n")))


def config_from(args: argparse.Namespace, overrides: dict[str, Any] | None = None, *,
                combined: bool = False) -> Config:
    """The configuration, or a usage error; ``combined`` also checks that the keys work
    together (``node.config.combined``: costs the protocol modules' import)."""
    from node.config.fields import ConfigError
    from node.config.settings import load_config

    try:
        config = load_config(getattr(args, "config", None), overrides=overrides)
        if combined:
            from node.config.combined import check_combined_keys

            check_combined_keys(config)
        return config
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

    ``token`` goes in every request as ``Authorization: Bearer``. A request given an
    ``idempotency_key`` is retried on transport failures (the node may have committed it before
    the connection broke): the node answers a repeated key with the original result.
    """

    RETRIES = 3

    def __init__(self, base_url: str, timeout: float = 30.0, token: str | None = None,
                 headers: Mapping[str, str] | None = None, origin: str = "--api") -> None:
        self.base_url = base_url.rstrip("/")
        self.origin = origin
        parts = urlsplit(self.base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port
        self.timeout = timeout
        self.headers = {"Accept": "application/json", **(headers or {})}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout)

    def _send(self, method: str, path: str, json_body: Any, params: Mapping[str, Any] | None,
              timeout: float | None, idempotency_key: str | None = None
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        target = path + ("?" + urlencode(params, doseq=True) if params else "")
        headers = dict(self.headers)
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        attempts = self.RETRIES if idempotency_key is not None else 1
        for attempt in range(attempts):
            conn = self._connection(timeout)
            try:
                conn.request(method, target, body=body, headers=headers)
                response = conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if attempt + 1 < attempts:
                    time.sleep(0.2 * 2**attempt)
                    continue
                reason = "timed out" if isinstance(exc, socket.timeout) else \
                    exc.__class__.__name__
                hint = ("is `syncnode run` running, and is --api right?" if self.origin == "--api"
                        else "is `syncnode run` running there? (--api URL names another "
                             "address)")
                raise CliError(f"no node answering at {self.base_url} ({reason}; address "
                               f"from {self.origin}); {hint}") from None
        if response.status >= 400:
            raw = response.read()
            conn.close()
            message = _error_text(raw)
            if response.status == 401:
                message += f" [{TOKEN_HINT}]"
            raise CliError(f"{method} {path}: HTTP {response.status}: {message}",
                           code=exit_code_for_status(response.status))
        return conn, response

    def request(self, method: str, path: str, *, json: Any = None,
                params: Mapping[str, Any] | None = None, timeout: float | None = None,
                idempotency_key: str | None = None) -> Any:
        conn, response = self._send(method, path, json, params, timeout or self.timeout,
                                    idempotency_key)
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


TOKEN_HINT = (f"the CLI reads the token from --token, ${TOKEN_ENV}, or <data dir>/{TOKEN_FILE} "
              "(--data-dir, or node.data_dir of --config)")


def _data_dir(args: argparse.Namespace) -> tuple[str, str, Config | None]:
    """The data dir the client reads, how it was named (for errors), and the config if read."""
    if (data_dir := getattr(args, "data_dir", None)) is not None:
        return data_dir, "--data-dir", None
    config = config_from(args)
    return (config.node.data_dir, "node.data_dir of --config" if getattr(args, "config", None)
            else "the default node.data_dir", config)


def token_for(args: argparse.Namespace, config: Config | None) -> str | None:
    """--token, then $SYNCNODE_API_TOKEN, then the data dir's token file."""
    if getattr(args, "token", None):
        return str(args.token)
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    data_dir = getattr(args, "data_dir", None)
    if data_dir is None:
        config = config or config_from(args)
        data_dir = config.node.data_dir
    return read_token(data_dir)


def api_url_for(args: argparse.Namespace) -> tuple[str, str, Config | None]:
    """The node's API URL, where it came from (for error messages), and the config if read.

    ``--api``, else the URL the node wrote into its data dir (``--data-dir``, else
    ``node.data_dir`` of ``--config``; see ``node.datadir.api_address``), else ``api.listen``.
    A data dir that does not exist, or an ``api_url`` a killed node left behind (``repo.lock``
    names a process that is gone), is an error: no node runs there, whatever answers elsewhere.
    """
    if args.api:
        return parse_api_url(args.api), "--api", None
    data_dir, named, config = _data_dir(args)
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise CliError(f"no data dir {data_dir} ({named}): no node was ever started there; "
                       "name the node's data dir with --data-dir DIR (or its address with "
                       "--api URL)")
    if found := read_api_url(path):
        if (pid := stale_holder(path)) is not None:
            raise CliError(f"no node runs on {data_dir}: its {API_URL_FILE} is left from a "
                           f"node that did not stop cleanly (pid {pid} is gone); start it with "
                           f"`syncnode run --data-dir {data_dir}`")
        return parse_api_url(found), f"{os.path.join(data_dir, API_URL_FILE)}", config
    config = config or config_from(args)
    where = os.path.join(data_dir, API_URL_FILE)
    return (parse_api_url(config.api.listen),
            f"api.listen, as {where} is absent: no node runs on {data_dir}, or it is still "
            "starting", config)


def client_for(args: argparse.Namespace) -> ApiClient:
    url, origin, config = api_url_for(args)
    try:
        token = token_for(args, config)
    except CliError:
        token = None  # no config to find a data dir in: the node will say a token is needed
    return ApiClient(url, token=token, origin=origin)


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api", metavar="URL",
                        help=f"node API (default: <data dir>/{API_URL_FILE}, which the node "
                             "writes, else api.listen of --config)")
    parser.add_argument("--config", metavar="FILE",
                        help="config file to find the node's data dir or API address in")
    parser.add_argument("--token", metavar="TOKEN",
                        help=f"API token (default: ${TOKEN_ENV}, else <data dir>/{TOKEN_FILE})")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="the node's data dir: its API address and token are read from it "
                             "(default: node.data_dir of --config)")


def lazy_command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command function that imports ``module`` only when the command runs."""

    def run(args: argparse.Namespace) -> int:
        code: int = getattr(importlib.import_module(module), name)(args)
        return code

    return run


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))
