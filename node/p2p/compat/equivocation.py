"""GossipSub's equivocation check without whole messages in memory (entry G5 of the table in
``node.p2p.compat``).

0.8.1's ``GossipSub._check_equivocation`` keeps the first message seen under each id
(``from_id + seqno``) in ``equivocation_detection``, to compare the data and topics of a later
message with the same id; the heartbeat trims the dict to its newest 500 entries only once it
holds more than 1,000. Each entry is the protobuf message itself, and a message parsed from a
received RPC shares that RPC's upb arena: every entry keeps a whole received frame (up to
``gossip_max_message_bytes``, 1 MB) alive. Measured on a node under steady load of 8-event
batches: ~27 MiB of upb arenas held by this dict alone (heaptrack), ~2 KB per event received
until the dict is full, and 500-1,000 full 1 MB frames (~1 GB) from a peer that sends them.

:class:`Fingerprints` is that dict with the same keys and bound, whose values keep what the
comparison reads: a digest of the data and the topic list (~200 B an entry).
"""

from __future__ import annotations

import hashlib

from libp2p.pubsub.pb import rpc_pb2

__all__ = ["Fingerprints"]


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


class _DataDigest:
    """Compares equal to the bytes it was made from, by digest (the check's ``data !=``)."""

    __slots__ = ("_digest",)

    def __init__(self, data: bytes) -> None:
        self._digest = _digest(data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _DataDigest):
            return self._digest == other._digest
        return isinstance(other, bytes) and _digest(other) == self._digest

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # (compared, never a key)


class _Seen:
    """What ``_check_equivocation`` reads of the first message: ``data`` and ``topicIDs``."""

    __slots__ = ("data", "topicIDs")

    def __init__(self, msg: rpc_pb2.Message) -> None:
        self.data = _DataDigest(msg.data)
        self.topicIDs = list(msg.topicIDs)  # (a list compares equal to a repeated field)


class Fingerprints(dict[bytes, _Seen]):
    """``equivocation_detection`` whose values are fingerprints, never messages."""

    def __setitem__(self, key: bytes, msg: rpc_pb2.Message | _Seen) -> None:
        super().__setitem__(key, msg if isinstance(msg, _Seen) else _Seen(msg))
