"""The stored form of an SDS event: the record a node keeps, with its Recon key (sans-IO).

The node's write paths (delivered by SDS, fetched by Recon, restored from a snapshot) and the
test-log generator of the Spark jobs (``spark_jobs.testlog``) all build their records here, so
the rule that names an event in Recon (``sync.recon.eventid.event_key``) is applied in one
place; ``storage`` stores this type as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.recon.eventid import CIP124_DRAFT, event_key
from sync.sds import Delivered, SignedEvent

__all__ = ["EventRecord", "record_of", "record_of_delivered", "record_of_event"]


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An event validated by the caller and ready to store."""

    recon_key: bytes
    message_id: str
    channel: str
    sender: str
    lamport: int
    wire: bytes
    #: The Sha256a lanes of ``recon_key`` when the caller has them already (the ingest
    #: workers compute them outside the daemon); computed on insert otherwise.
    lanes: tuple[int, ...] | None = None


def record_of(network_id: int, channel: str, sender: str, lamport: int, message_id: str,
              wire: bytes, layout: str = CIP124_DRAFT) -> EventRecord:
    """The record of a content event of ``network_id``, its Recon key in the network's
    eventId ``layout``."""
    key = event_key(network_id, channel, sender, lamport, bytes.fromhex(message_id), layout)
    return EventRecord(key, message_id, channel, sender, lamport, wire)


def record_of_delivered(network_id: int, channel: str, ev: Delivered,
                        layout: str = CIP124_DRAFT) -> EventRecord:
    """The record of an event SDS delivered on ``channel``."""
    return record_of(network_id, channel, ev.sender_id, ev.lamport, ev.message_id, ev.wire,
                     layout)


def record_of_event(network_id: int, ev: SignedEvent, layout: str = CIP124_DRAFT) -> EventRecord:
    """The record of a decoded event (never an ephemeral one: those are not stored)."""
    if ev.lamport is None:
        raise ValueError("ephemeral messages are never stored")
    return record_of(network_id, ev.channel_id, ev.sender_id, ev.lamport, ev.message_id, ev.wire,
                     layout)
