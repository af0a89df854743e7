"""Ingest triage of verified events, sans-IO: the one set of rules every event from outside
meets, whatever brought it (a Recon answer, a fetch by id, a snapshot) and wherever it was
verified (worker threads or worker processes: a driver's choice, both produce the same
``sync.ingest.VerifiedBatch``).

In order, per event:

1. **Invalid** (undecodable, bad id or signature, over the size limit): a batch holding any
   ends its session; each is counted under its kind and the peer pays ``invalid_event`` per
   event (``screen``).
2. **Unrequested**: an event whose key the session did not ask for ends it (the transfer core,
   ``sync.transfer.WantFetcher.accept``).
3. **Causal order**: what is left is taken in (Lamport, key) order: a dependency always has
   a lower Lamport timestamp, so SDS can deliver at once instead of buffering (``order``).
4. **Refused by policy** (a channel we do not replicate, a sender the closed group or the
   channel's writers do not admit, a timestamp outside the clock rule at ``now``): counted
   and charged ``rejected_event``; the session goes on, since an honest peer may hold such an
   event (``plan``).
5. **Own echo**: one of our own events coming back is stored directly when SDS no longer holds
   it, never delivered again (``IngestPlan.own``; SDS's ``stores_own_echo`` decides).
6. **Settled** content from another sender (whose dependencies SDS has delivered) takes SDS's
   bulk path; **the rest** (sync messages, missing dependencies, which wait in SDS's
   dependency buffer) takes the full protocol step, in causal order.

Before ``ingest_batch``, ``ingest_reads`` names what the channels' steps may ask of the log that
memory cannot answer (``sync.sds.ReadDelivered``, one per bounded channel); the driver reads its
store and answers each (``SdsChannel.layers.log.answer``), then runs ``ingest_batch``,
which reads no storage.

Duplicates never get this far on Recon: claims and ``ReadStored`` keep stored keys from being
fetched; a duplicate that still arrives is dropped by SDS (already delivered) and by the
store (unique key).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field

from sync.actions import Action, Penalize, Rejected
from sync.errors import ErrorKind, LocalProtocolError, RemoteProtocolError
from sync.gossip import SenderPolicy
from sync.ingest import VerifiedBatch, triage
from sync.peerscore import penalty_of
from sync.sds import ReadDelivered, RepairRefused, SdsChannel, SdsEvent
from sync.sds.profile import decode_event_in
from sync.stored_event import EventRecord

__all__ = ["IngestOutcome", "IngestPlan", "ingest_batch", "ingest_reads", "order", "plan",
           "screen", "sds_penalty"]


def screen(batch: VerifiedBatch, peer: str) -> tuple[list[Action], RemoteProtocolError | None]:
    """Per invalid event a ``Rejected``; and, if there is any, the error that ends the session
    (kind ``INVALID_EVENTS``, ``count``: how many, so the peer pays for each)."""
    if not batch.rejected:
        return [], None
    actions: list[Action] = [
        Rejected(peer, batch.rejected_kinds.get(i, ErrorKind.MALFORMED_EVENT), reason)
        for i, reason in batch.rejected.items()]
    first = next(iter(batch.rejected.values()))
    return actions, RemoteProtocolError(
        f"peer sent {len(batch.rejected)} invalid events ({first})", peer,
        ErrorKind.INVALID_EVENTS, len(batch.rejected))


def order(batch: VerifiedBatch) -> list[int]:
    """The positions of ``batch`` in causal order: by (Lamport timestamp, key)."""
    lamports, keys = batch.lamports, batch.keys
    return sorted(range(len(keys)), key=lambda i: (lamports[i], keys[i]))


@dataclass
class IngestPlan:
    """What becomes of a verified batch (positions into it)."""

    #: Refused by policy: counted and charged (the caller carries the actions out).
    actions: list[Action] = field(default_factory=list)
    refused: int = 0
    #: The refused positions, with why.
    refused_at: list[tuple[int, RemoteProtocolError]] = field(default_factory=list)
    #: Our own events coming back (stored directly if SDS no longer holds them).
    own: list[int] = field(default_factory=list)
    #: channel -> content from other senders, for SDS's bulk path.
    settled: dict[str, list[int]] = field(default_factory=dict)
    #: Sync messages: the full protocol step, in causal order.
    full: list[int] = field(default_factory=list)


def plan(batch: VerifiedBatch, positions: Sequence[int], peer: str | None,
         channels: Container[str], policy: SenderPolicy, now: float,
         max_ahead_ms: int) -> IngestPlan:
    """Triage ``positions`` (in causal order, none invalid) at wall time ``now``."""
    sorted_out = triage(batch, positions, channels, policy, now, max_ahead_ms)
    out = IngestPlan(settled=sorted_out.settled, refused=len(sorted_out.refused),
                     refused_at=sorted_out.refused)
    for _, exc in sorted_out.refused:
        out.actions.append(Rejected(peer, exc.kind, exc.reason))
        if peer is not None:
            out.actions.append(Penalize(peer, penalty_of(exc.kind)))
    own_id = policy.own_id
    for i in sorted_out.full:
        (out.own if batch.senders[i] == own_id else out.full).append(i)
    return out


@dataclass
class IngestOutcome:
    """What ``ingest_batch`` did; the driver stores ``records`` (bulk-delivered events and own
    echoes SDS no longer held, in log order), drains the channels in ``touched`` (their
    ``events()``: what the full step delivered) and carries out ``actions``."""

    actions: list[Action] = field(default_factory=list)
    records: list[EventRecord] = field(default_factory=list)
    #: channel -> how many were delivered in bulk.
    bulk: dict[str, int] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)
    #: channel -> events that took the full SDS step (waku channels count them as unsigned).
    stepped: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    #: Ids not refused: delivered, waiting for dependencies, already held, or an own echo.
    taken: list[str] = field(default_factory=list)


def ingest_reads(batch: VerifiedBatch, positions: Sequence[int],
                 channels: Mapping[str, SdsChannel]) -> dict[str, ReadDelivered]:
    """channel -> the one request that settles every question ``ingest_batch`` of
    ``positions`` can put to that channel's log (whatever triage, bulk path and full steps
    decide; channels holding their whole log in memory ask nothing)."""
    wanted: dict[str, list[tuple[str, int | None, Sequence[str], str]]] = {}
    for i in positions:
        name = batch.channels[i]
        if name in channels and i not in batch.rejected:
            wanted.setdefault(name, []).append(
                (batch.message_ids[i], batch.lamports[i], batch.histories[i], batch.senders[i]))
    out: dict[str, ReadDelivered] = {}
    for name, events in wanted.items():
        read = channels[name].layers.log.reads_for_steps(events)
        if read is not None:
            out[name] = read
    return out


def ingest_batch(batch: VerifiedBatch, wires: Sequence[bytes], positions: Sequence[int],
                 peer: str | None, channels: Mapping[str, SdsChannel], policy: SenderPolicy,
                 now: float, max_ahead_ms: int) -> IngestOutcome:
    """Feed the verified events at ``positions`` (causal order, none invalid: ``screen``
    first) into their SDS channels at wall time ``now``: the one ingest path of events from
    outside, whoever fetched and whoever verified them."""
    p = plan(batch, positions, peer, channels, policy, now, max_ahead_ms)
    out = IngestOutcome(actions=p.actions, refused=p.refused)
    full = list(p.full)
    for name, taken in p.settled.items():
        done, rest = channels[name].deliver_settled(
            [batch.message_ids[i] for i in taken], [batch.senders[i] for i in taken],
            [batch.lamports[i] for i in taken], [batch.histories[i] for i in taken], now)
        out.records += [_record(batch, wires, taken[pos]) for pos in done]
        full.extend(taken[pos] for pos in rest)
        if done:
            out.bulk[name] = len(done)
            out.touched.add(name)
    rank = {i: r for r, i in enumerate(positions)}
    failed = {i for i, _ in p.refused_at}
    for i in sorted(full + p.own, key=rank.__getitem__):
        name, wire = batch.channels[i], batch.canonical.get(i, wires[i])
        ch = channels[name]
        try:
            # Verified already: decoded again only for the full protocol step.
            event = decode_event_in(ch.setup.profile.name, wire, max_size=len(wire),
                                    verify_signature=False)
            if batch.senders[i] == policy.own_id:
                # An echo of ours is never delivered again; stored when SDS no longer holds it.
                if ch.layers.log.takes_back(event):
                    out.records.append(_record(batch, wires, i))
            else:
                if ch.receive_event(event, now, peer=peer) is not None:
                    # ``ingest_reads`` names every question of the batch: one left is a bug.
                    raise LocalProtocolError("a fetched event asked what was not read first")
                out.touched.add(name)
                out.stepped[name] = out.stepped.get(name, 0) + 1
        except RemoteProtocolError as exc:  # not after the worker's check; never trusted
            out.refused += 1
            failed.add(i)
            out.actions.append(Rejected(peer, exc.kind, exc.reason))
            if peer is not None:
                out.actions.append(Penalize(peer, penalty_of(exc.kind)))
    out.taken = [batch.message_ids[i] for i in positions if i not in failed]
    return out


def _record(batch: VerifiedBatch, wires: Sequence[bytes], i: int) -> EventRecord:
    """The stored form of verified event ``i`` (its key and lanes computed by the verifier)."""
    return EventRecord(batch.keys[i], batch.message_ids[i], batch.channels[i], batch.senders[i],
                       batch.lamports[i], batch.canonical.get(i, wires[i]), batch.lanes[i])


def sds_penalty(event: SdsEvent) -> Penalize | None:
    """What an SDS event costs a peer: a requester that asked for more rebroadcasts than its
    repair budget (``RepairRefused``) pays ``flood``; nothing else SDS reports is a fault."""
    if isinstance(event, RepairRefused):
        return Penalize(event.requester, "flood")
    return None
