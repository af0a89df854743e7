"""Batch verification of fetched events into compact columns (sans-IO).

The CPU-heavy part of taking in a fetched event (protobuf decode, id digest, Ed25519 check,
Recon key, Sha256a lanes) depends on nothing but the event's bytes and the network's settings,
so the node runs it in worker processes (``node.ingest``) and gets back, per batch, one
:class:`VerifiedBatch`: plain lists the daemon reads without decoding anything again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sync.errors import RemoteProtocolError
from sync.recon.eventid import CIP124_DRAFT
from sync.recon.sha256a import lanes_of
from sync.sds.profile import decode_event_by_channel
from sync.stored_event import record_of_event

__all__ = ["IngestSpec", "VerifiedBatch", "verify_wires"]


@dataclass(frozen=True)
class IngestSpec:
    """What a verifier needs to know about the network (sent once to each worker)."""

    network_id: int
    event_id_layout: str = CIP124_DRAFT
    #: channel -> SDS profile (``sync.sds.profile``); absent channels are "syncnode".
    profiles: Mapping[str, str] = field(default_factory=dict)
    max_event_bytes: int = 1 << 20


@dataclass(slots=True)
class VerifiedBatch:
    """Per input wire, in input order. ``rejected[i]`` holds why wire ``i`` is invalid
    (undecodable, bad id or signature, ephemeral); its other columns are placeholders."""

    message_ids: list[str] = field(default_factory=list)
    channels: list[str] = field(default_factory=list)
    senders: list[str] = field(default_factory=list)
    lamports: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    lanes: list[tuple[int, ...]] = field(default_factory=list)
    histories: list[tuple[str, ...]] = field(default_factory=list)
    #: False for a sync message (a timestamp, no content).
    has_content: list[bool] = field(default_factory=list)
    #: Index -> canonical wire, only where it differs from the bytes received.
    canonical: dict[int, bytes] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.message_ids)

    def extend(self, other: VerifiedBatch) -> None:
        """Append ``other`` (the next part of the same input)."""
        base = len(self.message_ids)
        self.message_ids += other.message_ids
        self.channels += other.channels
        self.senders += other.senders
        self.lamports += other.lamports
        self.keys += other.keys
        self.lanes += other.lanes
        self.histories += other.histories
        self.has_content += other.has_content
        self.canonical.update({base + i: w for i, w in other.canonical.items()})
        self.rejected.update({base + i: r for i, r in other.rejected.items()})


_NO_LANES = (0,) * 8


def verify_wires(spec: IngestSpec, wires: Sequence[bytes]) -> VerifiedBatch:
    """Decode and check every wire (size, id, signature under its channel's profile)."""
    out = VerifiedBatch()
    profiles = dict(spec.profiles)
    for i, wire in enumerate(wires):
        try:
            event = decode_event_by_channel(wire, profiles, max_size=spec.max_event_bytes)
            if event.lamport is None:
                raise RemoteProtocolError("ephemeral message is not an event")
            key = record_of_event(spec.network_id, event, spec.event_id_layout).recon_key
        except (RemoteProtocolError, ValueError) as exc:
            out.rejected[i] = getattr(exc, "reason", None) or str(exc)
            out.message_ids.append("")
            out.channels.append("")
            out.senders.append("")
            out.lamports.append(-1)
            out.keys.append(b"")
            out.lanes.append(_NO_LANES)
            out.histories.append(())
            out.has_content.append(False)
            continue
        out.message_ids.append(event.message_id)
        out.channels.append(event.channel_id)
        out.senders.append(event.sender_id)
        out.lamports.append(event.lamport)
        out.keys.append(key)
        out.lanes.append(lanes_of(key))
        out.histories.append(tuple([h.message_id for h in event.causal_history]))
        out.has_content.append(bool(event.content))
        if event.wire != wire:
            out.canonical[i] = event.wire
    return out
