"""What every ``syncnode`` client command shares: errors, the API client, common options.

Kept apart from ``node.cli`` so that the ``cli_*`` command modules import it without importing
``node.cli`` (which imports them to register their commands).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import httpx

from node.api_token import TOKEN_ENV, TOKEN_FILE, read_token
from node.config import Config, ConfigError, load_config

__all__ = [
    "ApiClient",
    "CliError",
    "add_client_options",
    "client_for",
    "config_from",
    "print_json",
]


class CliError(Exception):
    """A user-facing failure: printed as one ``error:`` line, exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        self.code = code
        super().__init__(message)


def config_from(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Config:
    try:
        return load_config(getattr(args, "config", None), overrides=overrides)
    except ConfigError as exc:
        raise CliError(str(exc), code=2) from None


class ApiClient:
    """Synchronous JSON client of a node's local API with one-line errors.

    ``token`` goes in every request as ``Authorization: Bearer``. A request given an
    ``idempotency_key`` is retried on transport failures (the node may have committed it before
    the connection broke): the node answers a repeated key with the original result.
    """

    RETRIES = 3

    def __init__(self, base_url: str, timeout: float = 30.0, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)

    def request(self, method: str, path: str, *, idempotency_key: str | None = None,
                **kwargs: Any) -> Any:
        if idempotency_key is not None:
            kwargs["headers"] = {**kwargs.get("headers", {}), "Idempotency-Key": idempotency_key}
        attempts = self.RETRIES if idempotency_key is not None else 1
        for attempt in range(attempts):
            try:
                response = self.http.request(method, path, **kwargs)
                break
            except httpx.TransportError as exc:
                if attempt + 1 < attempts:
                    time.sleep(0.2 * 2**attempt)
                    continue
                raise CliError(
                    f"no node answering at {self.base_url} ({exc.__class__.__name__}); "
                    "is `syncnode run` running, and is --api right?"
                ) from None
        if response.status_code >= 400:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            if response.status_code == 401:
                message += f" [{TOKEN_HINT}]"
            raise CliError(f"{method} {path}: HTTP {response.status_code}: {message}")
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)


TOKEN_HINT = (f"the CLI reads the token from --token, ${TOKEN_ENV}, or <data dir>/{TOKEN_FILE} "
              "(--data-dir, or node.data_dir of --config)")


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


def client_for(args: argparse.Namespace) -> ApiClient:
    config = None
    if args.api:
        url = args.api if "://" in args.api else f"http://{args.api}"
    else:
        config = config_from(args)
        url = f"http://{config.api.listen}"
    try:
        token = token_for(args, config)
    except CliError:
        token = None  # no config to find a data dir in: the node will say a token is needed
    return ApiClient(url, token=token)


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api", metavar="URL", help="node API (default: api.listen of --config)")
    parser.add_argument("--config", metavar="FILE", help="config file to read the API address from")
    parser.add_argument("--token", metavar="TOKEN",
                        help=f"API token (default: ${TOKEN_ENV}, else <data dir>/{TOKEN_FILE})")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="the node's data dir, to read its API token from "
                             "(default: node.data_dir of --config)")


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))
