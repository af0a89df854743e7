"""Batch verification of fetched events into compact columns (sans-IO).

The CPU-heavy part of taking in a fetched event (protobuf decode, id digest, Ed25519 check,
Recon key, Sha256a lanes) depends on nothing but the event's bytes and the network's settings,
so the node runs it in worker processes (``node.ingest``) and gets back, per batch, one
:class:`VerifiedBatch`: plain lists the daemon reads without decoding anything again.

:func:`triage` then decides, on those columns alone, what becomes of each verified event: refused
(a channel we do not replicate, a sender the closed group or the channel's writers do not admit,
a Lamport timestamp outside the clock rule at ``now``), a candidate for SDS's bulk path (content
from another sender), or the full protocol step (our own echoes, sync messages).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field

from sync.errors import ErrorKind, RemoteProtocolError
from sync.gossip import SenderCheck, SenderPolicy
from sync.recon.eventid import CIP124_DRAFT
from sync.recon.sha256a import lanes_of
from sync.sds.clock import check_lamport, lamport_bound
from sync.sds.profile import decode_event_by_channel
from sync.stored_event import record_of_event

__all__ = ["EventRules", "IngestSpec", "Triage", "VerifiedBatch", "admit_event", "triage",
           "verify_wires"]


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
    #: Index -> the kind of ``rejected[i]`` (what it costs the peer, its metric label).
    rejected_kinds: dict[int, ErrorKind] = field(default_factory=dict)

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
        self.rejected_kinds.update({base + i: k for i, k in other.rejected_kinds.items()})


_NO_LANES = (0,) * 8


def verify_wires(spec: IngestSpec, wires: Sequence[bytes]) -> VerifiedBatch:
    """Decode and check every wire (size, id, signature under its channel's profile)."""
    out = VerifiedBatch()
    profiles = dict(spec.profiles)
    for i, wire in enumerate(wires):
        try:
            event = decode_event_by_channel(wire, profiles, max_size=spec.max_event_bytes)
            if event.lamport is None:
                raise RemoteProtocolError("ephemeral message is not an event",
                                          kind=ErrorKind.REFUSED)
            key = record_of_event(spec.network_id, event, spec.event_id_layout).recon_key
        except (RemoteProtocolError, ValueError) as exc:
            if isinstance(exc, RemoteProtocolError):
                out.rejected[i], out.rejected_kinds[i] = exc.reason, exc.kind
            else:  # a field the record cannot hold
                out.rejected[i], out.rejected_kinds[i] = str(exc), ErrorKind.MALFORMED_EVENT
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


@dataclass
class Triage:
    """Positions of a :class:`VerifiedBatch`, by what becomes of them (each list in the order
    taken)."""

    #: channel -> content from other senders: SDS's bulk path may deliver them at once.
    settled: dict[str, list[int]] = field(default_factory=dict)
    #: Our own echoes and sync messages: the full protocol step.
    full: list[int] = field(default_factory=list)
    #: Refused, with why (counted and charged to the peer by the caller).
    refused: list[tuple[int, RemoteProtocolError]] = field(default_factory=list)


def admit_event(channel: str, sender: str, has_content: bool, lamport: int,
                channels: Container[str], policy: SenderPolicy, now: float, max_ahead_ms: int,
                bound: int | None = None) -> SenderCheck:
    """The rules every verified event from outside meets before it is stored, whatever
    brought it (gossip, Recon, fetch, a snapshot): ``channel`` is one of ``channels``,
    ``policy`` admits the sender, and ``lamport`` keeps the clock rule at ``now`` (wall
    seconds; ``bound``: ``lamport_bound(now, max_ahead_ms)`` if the caller has it).
    ``RemoteProtocolError`` says which failed."""
    if channel not in channels:
        raise RemoteProtocolError(f"event for a channel we do not replicate: {channel!r}",
                                  kind=ErrorKind.UNKNOWN_CHANNEL)
    verdict = policy.check(sender, channel, has_content)
    if bound is None:
        bound = lamport_bound(now, max_ahead_ms)
    if not 0 <= lamport <= bound:
        check_lamport(lamport, now, max_ahead_ms)  # raises, with the reason
    return verdict


@dataclass(frozen=True)
class EventRules:
    """``admit_event``'s settings, for callers that check events away from the daemon (the
    snapshot loader's worker processes): a plain picklable value."""

    channels: frozenset[str]
    policy: SenderPolicy
    max_ahead_ms: int

    def admit(self, channel: str, sender: str, has_content: bool, lamport: int,
              now: float) -> SenderCheck:
        return admit_event(channel, sender, has_content, lamport, self.channels, self.policy,
                           now, self.max_ahead_ms)


def triage(batch: VerifiedBatch, order: Sequence[int], channels: Container[str],
           policy: SenderPolicy, now: float, max_ahead_ms: int) -> Triage:
    """Sort the positions ``order`` of ``batch`` (verified, not rejected) by the rules that
    need no channel state (``admit_event``)."""
    out = Triage()
    bound = lamport_bound(now, max_ahead_ms)
    for i in order:
        name = batch.channels[i]
        try:
            verdict = admit_event(name, batch.senders[i], batch.has_content[i],
                                  batch.lamports[i], channels, policy, now, max_ahead_ms, bound)
        except RemoteProtocolError as exc:
            out.refused.append((i, exc))
            continue
        if verdict is SenderCheck.OWN or not batch.has_content[i]:
            out.full.append(i)
        else:
            out.settled.setdefault(name, []).append(i)
    return out
