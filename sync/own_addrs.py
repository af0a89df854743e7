"""Which of our own addresses go into our signed peer record (sans-IO).

A node listening on a wildcard (``/ip4/0.0.0.0/tcp/4001``, what config.example.toml tells a
user to write to accept peers from other machines) is reachable at each address of its
interfaces, but a wildcard in a record is worthless: a peer that dials ``0.0.0.0`` dials
itself, and the address book refuses it. Until this rule the record of such a node listed no
direct address at all: peers learnt a public node only from their own dials, never through
peer exchange, so a home node that joined the first public node knew no other one to fall
back on, and reached the second public node only through a circuit at the first (the second
had dialled the home's relayed address). So:

* a wildcard listen address stands for every interface address of its family that others may
  dial (global ones, then LAN ones; loopback, link-local and wildcard ones are no use to a
  peer elsewhere), with the listen port;
* addresses a dial-back proved reachable from the internet (``confirmed``: a global IP a peer
  reached us on, with our listen port, e.g. a router's forwarded port) come first;
* at most ``limit`` addresses, so a host with many interfaces cannot outgrow a record.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from sync.reachability import address_scope

__all__ = ["MAX_OWN_ADDRS", "own_addrs"]

MAX_OWN_ADDRS = 8
_RANK = {"global": 0, "local": 1}


def _family(ip: str) -> str:
    return "ip6" if ":" in ip else "ip4"


def own_addrs(listen: Sequence[str], interface_ips: Sequence[str],
              confirmed: Sequence[str] = (), limit: int = MAX_OWN_ADDRS) -> list[str]:
    """The direct addresses to advertise: ``confirmed`` first, then ``listen`` with each
    wildcard replaced by the dialable ``interface_ips`` of its family (global first)."""
    dialable = sorted((ip for ip in dict.fromkeys(interface_ips)
                       if address_scope(ip) in _RANK
                       and not ipaddress.ip_address(ip).is_link_local),
                      key=lambda ip: _RANK[address_scope(ip)])
    out: list[str] = list(confirmed)
    for full in listen:
        addr = full.split("/p2p/", 1)[0]  # our own id, if given: the record adds none
        parts = addr.split("/")
        if len(parts) < 3 or parts[1] not in ("ip4", "ip6") or \
                address_scope(parts[2]) != "unspecified":
            out.append(addr)
            continue
        out += ["/".join(["", parts[1], ip, *parts[3:]]) for ip in dialable
                if _family(ip) == parts[1]]
    return list(dict.fromkeys(out))[:limit]
