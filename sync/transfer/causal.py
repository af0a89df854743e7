"""The order in which a Recon session fetches the keys it found missing: causal order.

Reconciliation announces missing keys range by range as each range is settled, and a range
settles after as many round trips as it takes to split it down to key lists: where the node
already holds some of a stream (the gossip it heard before a peer crashed), small ranges settle
first and large ones later, so the announcements jump back and forth in time. Fetched in that
order, an event arrives before the events its causal history names; SDS holds it in its
dependency buffer, which is bounded per sender (``sds.max_waiting_per_sender``, 1,000): a
backlog of thousands evicted most of what it fetched, which the next session fetched again
(issue 37: 196 s for 6,001 events, ``sds_evicted_total{buffer="waiting"}`` 30,004).

A dependency always has a lower Lamport time than the event naming it, and a key carries its
event's Lamport time (its height, ``sync.recon.key_height``), so fetching by (height, key)
hands SDS every event after its dependencies, whatever order reconciliation found them in:
nothing waits, nothing is evicted, nothing is fetched twice. ``ReconExchange`` puts its missing
keys in this order when the session is done (and keeps the causally first when it must drop
some); ``ReconLifecycle.want`` claims them, and the transfer fetches them, in that order.
Keys without a height (the ceramic-one layout, or malformed: rejected when they arrive) follow
in key order, which is the order a fresh node's reconciliation announces anyway.
"""

from __future__ import annotations

from collections.abc import Iterable

from sync.errors import RemoteProtocolError
from sync.recon.eventid import key_height

__all__ = ["causal_order", "causal_rank", "height_of"]

#: Sorts after every height (a CBOR unsigned integer is below 2**64).
_NO_HEIGHT = 1 << 64


def height_of(key: bytes) -> int | None:
    """The Lamport time a key carries; None when it has none or is malformed."""
    try:
        return key_height(key)
    except RemoteProtocolError:
        return None


def causal_rank(key: bytes) -> tuple[int, bytes]:
    """A key's place in causal order: (height, key); a key without a height after all."""
    height = height_of(key)
    return (_NO_HEIGHT if height is None else height, key)


def causal_order(keys: Iterable[bytes]) -> list[bytes]:
    """``keys`` by (height, key): every event after the events it can depend on."""
    return sorted(keys, key=causal_rank)
