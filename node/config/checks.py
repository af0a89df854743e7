"""Value checks for config keys that need more than a range: multiaddrs, peer ids, URLs, paths.

Stdlib only, so that loading a config (which every client command may do to find the API)
stays cheap. Each check returns None when the value is fine, else a short reason.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

__all__ = [
    "check_database_url",
    "check_dir",
    "check_listen_multiaddrs",
    "check_peer_id",
    "check_peer_ids",
    "check_peer_multiaddrs",
    "multiaddr_problem",
    "peer_id_problem",
]

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_HOSTNAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?\.?)+")
_SQL_URL = re.compile(r"(sqlite|postgresql)(\+[a-z0-9_]+)?://.*")


def _b58decode(text: str) -> bytes | None:
    number = 0
    for char in text:
        digit = _B58.find(char)
        if digit < 0:
            return None
        number = number * 58 + digit
    pad = len(text) - len(text.lstrip("1"))
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    return b"\0" * pad + body


def peer_id_problem(value: str) -> str | None:
    """A libp2p peer id in base58: an identity multihash (Ed25519) or a sha2-256 one."""
    raw = _b58decode(value) if 40 <= len(value) <= 60 else None
    if raw is None or len(raw) < 2 or raw[0] not in (0x00, 0x12) or raw[1] != len(raw) - 2:
        return f"not a libp2p peer id: {value!r} (expected base58 like 12D3KooW...)"
    return None


def multiaddr_problem(value: str, *, need_peer: bool, allow_dns: bool) -> str | None:
    """``/ip4|ip6|dns|dns4|dns6/HOST/tcp/PORT`` (+ ``/p2p/PEER_ID`` when ``need_peer``)."""
    parts = value.split("/")
    shape = "/ip4/HOST/tcp/PORT" + ("/p2p/PEER_ID" if need_peer else "")
    if len(parts) < 5 or parts[0] or parts[3] != "tcp":
        return f"not a multiaddr {shape}: {value!r}"
    proto, host, port = parts[1], parts[2], parts[4]
    try:
        if proto == "ip4":
            ipaddress.IPv4Address(host)
        elif proto == "ip6":
            ipaddress.IPv6Address(host)
        elif proto in ("dns", "dns4", "dns6") and allow_dns:
            if not _HOSTNAME.fullmatch(host):
                return f"bad host name {host!r} in {value!r}"
        else:
            return f"unsupported protocol /{proto} in {value!r} (ip4, ip6, dns4, dns6)"
    except ValueError:
        return f"bad {proto} address {host!r} in {value!r}"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        return f"tcp port {port!r} in {value!r} is not a number in 0..65535"
    rest = parts[5:]
    if need_peer:
        if len(rest) == 5 and rest[0] == "p2p" and rest[2:4] == ["p2p-circuit", "p2p"]:
            # Through a relay: /ip4/R/tcp/P/p2p/<relay>/p2p-circuit/p2p/<peer> (docs/network.md).
            return peer_id_problem(rest[1]) or peer_id_problem(rest[4])
        if len(rest) != 2 or rest[0] != "p2p":
            return f"must end in /p2p/<peer id>: {value!r}"
        return peer_id_problem(rest[1])
    if rest:
        return f"unexpected {'/'.join(['', *rest])!r} after the port in {value!r}"
    return None


def check_listen_multiaddrs(v: Any) -> str | None:
    if not v:
        return "at least one listen address is required"
    for addr in v:
        if problem := multiaddr_problem(addr, need_peer=False, allow_dns=False):
            return problem
    return None


def check_peer_multiaddrs(v: Any) -> str | None:
    for addr in v:
        if problem := multiaddr_problem(addr, need_peer=True, allow_dns=True):
            return problem
    return None


def check_peer_id(v: Any) -> str | None:
    return peer_id_problem(v)


def check_peer_ids(v: Any) -> str | None:
    for peer in v:
        if problem := peer_id_problem(peer):
            return problem
    return None


def check_database_url(v: Any) -> str | None:
    if v and not _SQL_URL.fullmatch(v):
        return "expected sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB"
    return None


def check_dir(v: Any) -> str | None:
    """Empty (a default applies) or a path that is a directory or does not exist yet."""
    if not v:
        return None
    if "\0" in v:
        return "must not contain NUL"
    path = Path(v).expanduser()
    for parent in (path, *path.parents):
        if parent.exists():
            return None if parent.is_dir() else f"{parent} exists and is not a directory"
    return None
