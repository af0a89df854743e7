"""The stored form of a signed SDS event: the columns a node keeps, with its Recon key (sans-IO).

The node's write path (``node.replication.record_of_event``) and the test-log generator of the Spark
jobs (``spark_jobs.testlog``) both turn a ``SignedEvent`` into these fields; keeping the rule
here lets the jobs build logs without importing the node.
"""

from __future__ import annotations

from typing import NamedTuple

from sync.recon.eventid import CIP124_DRAFT, event_key
from sync.sds import SignedEvent

__all__ = ["StoredFields", "stored_fields"]


class StoredFields(NamedTuple):
    """In ``storage.EventRecord`` field order, so ``EventRecord(*fields)`` builds the record."""

    recon_key: bytes
    message_id: str
    channel: str
    sender: str
    lamport: int
    wire: bytes


def stored_fields(network_id: int, ev: SignedEvent, layout: str = CIP124_DRAFT) -> StoredFields:
    """The stored columns of a content event of ``network_id`` (never an ephemeral one), its
    Recon key in the network's eventId ``layout``."""
    if ev.lamport is None:
        raise ValueError("ephemeral messages are never stored")
    return StoredFields(
        event_key(network_id, ev.channel_id, ev.sender_id, ev.lamport,
                  bytes.fromhex(ev.message_id), layout),
        ev.message_id, ev.channel_id, ev.sender_id, ev.lamport, ev.wire,
    )
