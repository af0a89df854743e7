"""What every ``syncnode`` client command shares: errors, the API client, common options.

Kept apart from ``node.cli`` so that the ``cli_*`` command modules import it without importing
``node.cli`` (which imports them to register their commands).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import httpx

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
    """Synchronous JSON client of a node's local API with one-line errors."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise CliError(
                f"no node answering at {self.base_url} ({exc.__class__.__name__}); "
                "is `syncnode run` running, and is --api right?"
            ) from None
        if response.status_code >= 400:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            raise CliError(f"{method} {path}: HTTP {response.status_code}: {message}")
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)


def client_for(args: argparse.Namespace) -> ApiClient:
    if args.api:
        url = args.api if "://" in args.api else f"http://{args.api}"
    else:
        url = f"http://{config_from(args).api.listen}"
    return ApiClient(url)


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api", metavar="URL", help="node API (default: api.listen of --config)")
    parser.add_argument("--config", metavar="FILE", help="config file to read the API address from")


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))
