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

Duplicates never get this far on Recon: claims and ``ReadStored`` keep stored keys from being
fetched; a duplicate that still arrives is dropped by SDS (already delivered) and by the
store (unique key).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, field

from sync.errors import ErrorKind, RemoteProtocolError
from sync.gossip import SenderPolicy
from sync.ingest import VerifiedBatch, triage
from sync.peerscore import penalty_of
from sync.replication.actions import Action, Penalize, Rejected

__all__ = ["IngestPlan", "order", "plan", "screen"]


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
    out = IngestPlan(settled=sorted_out.settled, refused=len(sorted_out.refused))
    for _, exc in sorted_out.refused:
        out.actions.append(Rejected(peer, exc.kind, exc.reason))
        if peer is not None:
            out.actions.append(Penalize(peer, penalty_of(exc.kind)))
    own_id = policy.own_id
    for i in sorted_out.full:
        (out.own if batch.senders[i] == own_id else out.full).append(i)
    return out
