"""How a config key is declared (``opt``: its default and check), the checks several sections
share, and :class:`ConfigError`.

Stdlib only, like ``node.config_checks``: loading a config stays cheap for client commands.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

__all__ = [
    "Check",
    "ConfigError",
    "channel_names",
    "fraction",
    "host_names",
    "host_port",
    "is_loopback_host",
    "non_negative",
    "one_of",
    "opt",
    "parse_host_port",
    "positive",
]

class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or impossible."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"config error: {key}: {message}")


Check = Callable[[Any], str | None]


def opt(default: Any, check: Check | None = None) -> Any:
    return field(default=default, metadata={"check": check} if check else {})


def positive(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def non_negative(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


def fraction(v: Any) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


def one_of(*allowed: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in allowed else f"must be one of {', '.join(allowed)}"

    return check


def parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def host_port(v: Any) -> str | None:
    try:
        parse_host_port(v)
    except ValueError as exc:
        return str(exc)
    return None


def channel_names(v: Any) -> str | None:
    if not v:
        return "at least one channel is required"
    bad = [c for c in v if not c or len(c) > 128 or not c.isprintable()]
    return f"invalid channel name {bad[0]!r}" if bad else None


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (brackets around IPv6 allowed)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_names(v: Any) -> str | None:
    bad = [h for h in v if not re.fullmatch(r"[A-Za-z0-9.-]{1,253}|\[?[0-9A-Fa-f:.]+\]?", h)]
    return f"not a host name or address (no port): {bad[0]!r}" if bad else None
