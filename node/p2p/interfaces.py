"""This machine's interface addresses: what a wildcard listen address stands for
(``sync.own_addrs`` decides which of them to advertise)."""

from __future__ import annotations

import socket

import psutil

__all__ = ["interface_ips"]

# Interfaces rarely change; the reachability loop asks once a second.
_CACHE_S = 10.0
_cache: tuple[float, list[str]] = (-_CACHE_S, [])


def interface_ips(now: float) -> list[str]:
    """Every IPv4 and IPv6 address of this machine's interfaces (unfiltered); ``now`` on the
    node's clock (its ``now()``) ages the cache."""
    global _cache
    at, ips = _cache
    if 0 <= now - at < _CACHE_S:
        return ips
    try:
        found = [a.address.split("%", 1)[0]
                 for addrs in psutil.net_if_addrs().values() for a in addrs
                 if a.family in (socket.AF_INET, socket.AF_INET6)]
    except OSError:
        found = []
    _cache = (now, found)
    return found
