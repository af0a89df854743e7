"""Which network an IP belongs to, and a per-network share of a bounded resource, sans-IO.

A peer id costs nothing and one machine can hold thousands; a block of addresses costs
something. Rules that must not be bought with identities therefore count *networks*: the
IPv4 ``/prefix_v4`` or IPv6 ``/prefix_v6`` an address lies in (the address book's buckets are
/16 and /32, ``sync.membership.addrs``).
"""

from __future__ import annotations

import ipaddress
from collections import Counter

__all__ = ["NetworkShare", "network_of", "parse_ip"]


def network_of(ip: str | None, prefix_v4: int, prefix_v6: int) -> str | None:
    """``ip``'s network as text (``"198.18.0.0/16"``), or None when ``ip`` is no address."""
    address = parse_ip(ip)
    if address is None:
        return None
    prefix = prefix_v4 if address.version == 4 else prefix_v6
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))


def parse_ip(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as an IP address (an IPv4-mapped IPv6 address as the IPv4 one it carries),
    None when it is none."""
    if not text:
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class NetworkShare:
    """At most ``per_network`` holders per network: ``take`` a slot for a holder (True if
    granted, or already held), ``release`` it. Refusals are counted in ``refused``."""

    def __init__(self, per_network: int) -> None:
        if per_network < 1:
            raise ValueError(f"per_network must be at least 1, got {per_network!r}")
        self.per_network = per_network
        self._holders: dict[object, str] = {}
        self._count: Counter[str] = Counter()
        self.refused = 0

    def take(self, holder: object, network: str | None) -> bool:
        if holder in self._holders:
            return True
        key = network or "-"  # no address known (relayed): all such holders share one
        if self._count[key] >= self.per_network:
            self.refused += 1
            return False
        self._holders[holder] = key
        self._count[key] += 1
        return True

    def release(self, holder: object) -> None:
        key = self._holders.pop(holder, None)
        if key is not None:
            self._count[key] -= 1
            if self._count[key] <= 0:
                del self._count[key]

    def keep_only(self, holders: set[object]) -> None:
        """Release every holder not in ``holders`` (those whose resource ended elsewhere)."""
        for holder in [h for h in self._holders if h not in holders]:
            self.release(holder)

    def held(self, network: str | None) -> int:
        return self._count.get(network or "-", 0)

    def most(self) -> int:
        """The largest number of slots one network holds."""
        return max(self._count.values(), default=0)
