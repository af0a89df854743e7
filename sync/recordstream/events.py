"""How one of our events becomes a RecordStreamItem (pure functions; see docs/recordstream.md).

- transaction = the signed canonical event wire bytes, untouched;
- record = a ``SyncnodeRecord``: SHA-384 of those bytes (field 2) and the consensus timestamp
  (field 3), both where Hedera's TransactionRecord has them, plus the event's message id, channel,
  sender and Lamport timestamp;
- consensus time = ``lamport * 10**6 + rank`` ns, where rank is the event's index among the
  events sharing its Lamport timestamp, in (lamport, message_id) order. SDS Lamport timestamps are
  milliseconds (``max(timeNowInMs, last + 1)``), so the instants are real times, and any node
  holding the same log computes the same ones;
- node-local data (the local sequence number and receive time) is not in the record, so that
  files are identical across nodes; it can go into the optional SYNCNODE_DELIVERY sidecar.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sync.errors import LocalProtocolError
from sync.recordstream import record_stream_pb2 as pb
from sync.recordstream.hashing import sha384

__all__ = [
    "MAX_RANK",
    "ConsensusClock",
    "SnapshotEvent",
    "assign_consensus_times",
    "consensus_time_ns",
    "delivery_sidecar_record",
    "event_item",
    "event_record",
    "timestamp",
]

MAX_RANK = 1_000_000
_NS = 1_000_000_000


@dataclass(frozen=True)
class SnapshotEvent:
    """One delivered SDS message as the snapshot job reads it from storage."""

    seq: int
    message_id: str
    channel: str
    sender: str
    lamport: int
    wire: bytes
    received_at_ms: int


def consensus_time_ns(lamport: int, rank: int) -> int:
    """The consensus instant of the ``rank``-th event (0-based) with Lamport time ``lamport``."""
    if lamport < 0 or not 0 <= rank < MAX_RANK:
        raise LocalProtocolError(f"lamport {lamport} / rank {rank} out of range")
    return lamport * MAX_RANK + rank


class ConsensusClock:
    """Hands out consensus times to events arriving in (lamport, message_id) order."""

    def __init__(self) -> None:
        self._last: tuple[int, str] | None = None
        self._rank = 0

    def stamp(self, event: SnapshotEvent) -> int:
        key = (event.lamport, event.message_id)
        if self._last is not None and key <= self._last:
            raise LocalProtocolError(f"event {event.message_id} out of (lamport, message_id) order")
        same_ms = self._last is not None and self._last[0] == event.lamport
        self._rank = self._rank + 1 if same_ms else 0
        self._last = key
        return consensus_time_ns(event.lamport, self._rank)


def assign_consensus_times(
    events: Iterable[SnapshotEvent],
) -> Iterator[tuple[SnapshotEvent, int]]:
    """Pair each event with its consensus time; events must come in (lamport, message_id) order."""
    clock = ConsensusClock()
    for event in events:
        yield event, clock.stamp(event)


def timestamp(consensus_ns: int) -> pb.Timestamp:
    seconds, nanos = divmod(consensus_ns, _NS)
    return pb.Timestamp(seconds=seconds, nanos=nanos)


def event_record(event: SnapshotEvent, consensus_ns: int) -> bytes:
    """The serialized record (TransactionRecord position) of an event."""
    record = pb.SyncnodeRecord(
        transaction_hash=sha384(event.wire),
        consensus_timestamp=timestamp(consensus_ns),
        event=pb.SyncnodeEventInfo(
            message_id=event.message_id,
            channel=event.channel,
            sender=event.sender,
            lamport=event.lamport,
        ),
    )
    return record.SerializeToString(deterministic=True)


def event_item(event: SnapshotEvent, consensus_ns: int) -> tuple[bytes, bytes]:
    """``(record_bytes, transaction_bytes)``: the two inputs of ``item_hash``."""
    return event_record(event, consensus_ns), event.wire


def delivery_sidecar_record(event: SnapshotEvent, consensus_ns: int) -> pb.TransactionSidecarRecord:
    """The SYNCNODE_DELIVERY sidecar record of an event: what only this node knows about it."""
    return pb.TransactionSidecarRecord(
        consensus_timestamp=timestamp(consensus_ns),
        syncnode_delivery=pb.SyncnodeDelivery(
            message_id=event.message_id, seq=event.seq, received_at_ms=event.received_at_ms
        ),
    )
