"""How a config key is declared (``opt``: its default and check), the checks several sections
share, and :class:`ConfigError`.

Stdlib only, like ``node.config.checks``: loading a config stays cheap for client commands.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

__all__ = [
    "CHANNEL_NAME",
    "DAY",
    "GIB",
    "HOUR",
    "MIB",
    "Check",
    "ConfigError",
    "at_least",
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
    "shown",
]

# Units for the keys' upper bounds (``opt(..., most=...)``).
MIB = 1 << 20
GIB = 1 << 30
HOUR = 3600
DAY = 86_400


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or impossible. ``origin``: the
    environment variable it came from, named first (the user wrote that, not the key)."""

    def __init__(self, key: str, message: str, origin: str | None = None) -> None:
        self.key = key
        super().__init__(f"config error: {f'{origin} ({key})' if origin else key}: {message}")


Check = Callable[[Any], str | None]


def opt(default: Any, check: Check | None = None, *, most: float | None = None) -> Any:
    """A config key: its default, its check, and (numbers) ``most``, the largest sane value.

    Every numeric key has a ``most`` (``tests/node/test_config_bounds.py`` holds them to it):
    a value far past anything useful (``storage.batch_max_events = 2^63-1``) is a typo or an
    attack on the node's memory, so it is refused with the bound named.
    """
    metadata: dict[str, Any] = {}
    if check:
        metadata["check"] = check
    if most is not None:
        metadata["most"] = most
    return field(default=default, metadata=metadata)


def shown(value: Any) -> str:
    """A value as the user wrote it: strings quoted, lists comma-separated, no Python reprs
    of tuples."""
    if isinstance(value, tuple | list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, str):
        return "'" + value + "'" if value.isprintable() else repr(value)
    return str(value)


def positive(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def non_negative(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


def at_least(low: float, named: str | None = None) -> Check:
    def check(v: Any) -> str | None:
        return None if v >= low else f"must be >= {named or shown(low)}"

    return check


def fraction(v: Any) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


def one_of(*allowed: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in allowed else f"must be one of {', '.join(allowed)}"

    return check


def parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT with PORT in 0..65535, got {shown(value)}")
    return host.strip("[]"), int(port)


def host_port(v: Any) -> str | None:
    try:
        parse_host_port(v)
    except ValueError as exc:
        return str(exc)
    return None


# A channel name goes into a gossip topic (/syncnode/NET/sds/NAME), API paths and file names:
# no separators, no dot-dot, nothing a shell or URL must escape.
CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def channel_names(v: Any) -> str | None:
    if not v:
        return "at least one channel is required"
    bad = [c for c in v if not CHANNEL_NAME.fullmatch(c)]
    return (f"invalid channel name {shown(bad[0])}: a channel name is 1 to 128 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit") if bad else None


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
