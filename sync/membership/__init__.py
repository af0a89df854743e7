"""Membership, sans-IO: the address book fed by peer exchange, and the connection manager.

Both make decisions only; ``node.replication.membership`` and ``node.p2p`` do the I/O.
docs/network.md ("Membership") describes the rules and the attacks they answer.
"""

from __future__ import annotations

from sync.membership.addrbook import OFFER_OUTCOMES, AddressBook, BookEntry, BookLimits
from sync.membership.addrs import ParsedAddr, bucket_of, is_relayed, parse_addr
from sync.membership.connmanager import (
    Admission,
    ConnectionManager,
    ConnLimits,
    ConnState,
    Housekeeping,
)
from sync.membership.liveness import Liveness, NetworkBack
from sync.membership.px_schedule import JITTER as PX_JITTER
from sync.membership.px_schedule import px_delay
from sync.membership.px_wire import decode_records, encode_records

__all__ = [
    "OFFER_OUTCOMES",
    "PX_JITTER",
    "AddressBook",
    "Admission",
    "BookEntry",
    "BookLimits",
    "ConnLimits",
    "ConnState",
    "ConnectionManager",
    "Housekeeping",
    "Liveness",
    "NetworkBack",
    "ParsedAddr",
    "bucket_of",
    "decode_records",
    "encode_records",
    "is_relayed",
    "parse_addr",
    "px_delay",
]
