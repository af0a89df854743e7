"""The event model glue: an SDS delivery becomes a storage record with its Recon key."""

from __future__ import annotations

from storage import EventRecord
from sync.recon.eventid import CIP124_DRAFT, event_key
from sync.sds import Delivered, SignedEvent
from sync.stored_event import stored_fields

__all__ = ["record_of_delivered", "record_of_event"]


def record_of_delivered(network_id: int, channel: str, ev: Delivered,
                        layout: str = CIP124_DRAFT) -> EventRecord:
    return EventRecord(
        recon_key=event_key(network_id, channel, ev.sender_id, ev.lamport,
                            bytes.fromhex(ev.message_id), layout),
        message_id=ev.message_id,
        channel=channel,
        sender=ev.sender_id,
        lamport=ev.lamport,
        wire=ev.wire,
    )


def record_of_event(network_id: int, ev: SignedEvent, layout: str = CIP124_DRAFT) -> EventRecord:
    return EventRecord(*stored_fields(network_id, ev, layout))
