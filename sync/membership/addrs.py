"""What a peer's advertised multiaddr is to the address book: usable or not, and its bucket.

A bucket is the network an address lives in: the /16 of an IPv4 address, the /32 of an IPv6
one, the name of a DNS one. A relayed address (``.../p2p/<relay>/p2p-circuit``) is filed under
its relay's bucket with a ``relay:`` prefix: reaching the peer depends on that relay.
Diversity rules count entries per bucket, so one operator with one block of addresses (or one
relay) cannot fill the book.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = ["ParsedAddr", "bucket_of", "is_relayed", "parse_addr"]

_IP_PROTOCOLS = ("ip4", "ip6")
_DNS_PROTOCOLS = ("dns", "dns4", "dns6")
_MAX_ADDR_CHARS = 512


@dataclass(frozen=True)
class ParsedAddr:
    text: str
    bucket: str
    relayed: bool


def is_relayed(addr: str) -> bool:
    return "/p2p-circuit" in addr


def _host_bucket(proto: str, host: str) -> str | None:
    """The network of ``host``, or None when it is no address a peer can be dialled at."""
    if proto in _DNS_PROTOCOLS:
        name = host.lower().rstrip(".")
        if not name or len(name) > 253:
            return None
        return "dns:" + ".".join(name.split(".")[-2:])
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.is_unspecified or ip.is_multicast or (ip.version == 4) != (proto == "ip4"):
        return None
    if ip.version == 4:
        return str(ipaddress.ip_network(f"{ip}/16", strict=False))
    return str(ipaddress.ip_network(f"{ip}/32", strict=False))


def parse_addr(addr: str, peer_id: str) -> ParsedAddr | None:
    """``addr`` (as a peer record lists it: no trailing ``/p2p/<its own id>``, though one is
    tolerated) if the book can use it to reach ``peer_id``, else None.

    Accepted shapes: ``/ip4|ip6|dns|dns4|dns6/HOST/tcp/PORT`` and the relayed
    ``/ip4|.../HOST/tcp/PORT/p2p/RELAY/p2p-circuit``.
    """
    if not addr or len(addr) > _MAX_ADDR_CHARS:
        return None
    parts = addr.rstrip("/").split("/")
    if parts[-2:] == ["p2p", peer_id]:
        parts = parts[:-2]
    if len(parts) < 5 or parts[0] or parts[3] != "tcp":
        return None
    proto, host, port = parts[1], parts[2], parts[4]
    if proto not in _IP_PROTOCOLS + _DNS_PROTOCOLS or not port.isdigit():
        return None
    if not 0 < int(port) < 65536:
        return None
    bucket = _host_bucket(proto, host)
    if bucket is None:
        return None
    rest = parts[5:]
    if not rest:
        return ParsedAddr("/".join(parts), bucket, relayed=False)
    if len(rest) == 3 and rest[0] == "p2p" and rest[1] and rest[1] != peer_id \
            and rest[2] == "p2p-circuit":
        return ParsedAddr("/".join(parts), "relay:" + bucket, relayed=True)
    return None


def bucket_of(addrs: list[ParsedAddr]) -> str:
    """An entry's bucket: that of its first direct address, else of its first relayed one."""
    direct = [a for a in addrs if not a.relayed]
    return (direct or addrs)[0].bucket
