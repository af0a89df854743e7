"""Address scope: may a peer we reach at one address make us dial another? Sans-IO.

Every address a peer tells us (signed records in peer exchange, DHT answers, hole-punch
addresses, identify's "this is how I see you") is checked against the address we reach that
peer on (its *source*), so that no stranger can aim our dials at services on our own host
or network:

* a **global** address may come from anyone;
* a **loopback** address only from a loopback source (both on this host);
* a **private** address (RFC 1918, carrier-grade NAT 100.64/10, ULA fc00::/7) or a
  **link-local** one only from a source in the same private block (a neighbour on that
  network);
* a DNS name is refused from a remote peer unless the caller allows names (our own records
  never hold one; a name can resolve to anything, ``localhost`` included); ``localhost``
  itself is a loopback address;
* unspecified, multicast, broadcast and reserved addresses are never dialled.

198.18.0.0/15 (benchmarking) counts as global, as in ``sync.reachability``: tests/net uses it
as the internet. A source we know no IP for (``None``) counts as global.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from sync.networks import parse_ip

__all__ = [
    "SCOPE_REASONS",
    "Scope",
    "addr_host",
    "addr_refusal",
    "in_scope",
    "relay_of",
    "scope_of",
    "source_ip",
]

# The reasons :func:`addr_refusal` gives: the label values of the refusal metric.
SCOPE_REASONS = ("loopback", "private", "link_local", "dns", "invalid")

_PRIVATE_NETS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"))
_LINK_LOCAL_NETS = tuple(ipaddress.ip_network(n) for n in ("169.254.0.0/16", "fe80::/10"))
_NEVER_NETS = tuple(ipaddress.ip_network(n) for n in ("0.0.0.0/8", "240.0.0.0/4"))
_DNS_PROTOCOLS = ("dns", "dns4", "dns6")


@dataclass(frozen=True)
class Scope:
    """Where an address lives: ``kind`` is loopback, link_local, private, global or invalid;
    ``block`` the private or link-local network it is in ("" otherwise)."""

    kind: str
    block: str = ""


_GLOBAL = Scope("global")
_INVALID = Scope("invalid")


def scope_of(host: str | None) -> Scope:
    """The scope of an IP address, or of ``localhost`` (None: an unknown source, global)."""
    if host is None:
        return _GLOBAL
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return Scope("loopback")
    ip = parse_ip(host)
    if ip is None:
        return _INVALID
    if ip.is_loopback:
        return Scope("loopback")
    if ip.is_unspecified or ip.is_multicast or \
            any(ip in net for net in _NEVER_NETS if net.version == ip.version) or \
            (ip.version == 4 and ip == ipaddress.IPv4Address("255.255.255.255")):
        return _INVALID
    for kind, nets in (("private", _PRIVATE_NETS), ("link_local", _LINK_LOCAL_NETS)):
        for net in nets:
            if net.version == ip.version and ip in net:
                return Scope(kind, str(net))
    return _GLOBAL


def in_scope(target: str, source: str | None) -> str | None:
    """None when a peer reached at ``source`` (an IP) may make us dial ``target`` (an IP or
    ``localhost``); else why not, one of :data:`SCOPE_REASONS`."""
    where = scope_of(target)
    if where.kind == "global":
        return None
    if where.kind == "invalid":
        return "invalid"
    return None if scope_of(source) == where else where.kind


def addr_host(addr: str) -> tuple[str, str] | None:
    """``(protocol, host)`` of a multiaddr's first component (``ip4``, ``ip6`` or a DNS one);
    for a relayed address that is the relay's. None when it starts with something else."""
    parts = addr.split("/")
    if len(parts) < 3 or parts[0] or not parts[2]:
        return None
    if parts[1] in ("ip4", "ip6") or parts[1] in _DNS_PROTOCOLS:
        return parts[1], parts[2]
    return None


def source_ip(address: str | None) -> str | None:
    """The IP (or name) a connection's remote multiaddr starts with: the source to check a
    peer's addresses against (a relay's, when the connection is relayed)."""
    found = addr_host(address) if address else None
    return found[1] if found is not None else None


def relay_of(address: str | None) -> str | None:
    """The relay's peer id when ``address`` is a relayed connection's remote address
    (``/p2p/<relay>/p2p-circuit/...``, as libp2p reports it): its source is that relay's."""
    parts = (address or "").split("/")
    if len(parts) >= 4 and parts[1] == "p2p" and parts[3] == "p2p-circuit" and parts[2]:
        return parts[2]
    return None


def addr_refusal(addr: str, source: str | None, *, names: bool = False) -> str | None:
    """None when a peer reached at ``source`` may make us dial the multiaddr ``addr``; else
    the reason (:data:`SCOPE_REASONS`). ``names``: DNS names are acceptable (only from a
    source that is not remote would they be otherwise; ``localhost`` never is)."""
    found = addr_host(addr)
    if found is None:
        return "invalid"
    proto, host = found
    if proto in _DNS_PROTOCOLS and scope_of(host).kind == "invalid":
        # A name: it may resolve anywhere, so only a source on our own host may give one.
        return None if names or scope_of(source).kind == "loopback" else "dns"
    return in_scope(host, source)
