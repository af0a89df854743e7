"""The replication core: every rule of how a node replicates, sans-IO (no trio, libp2p, SQL or
clock), so that the node (``node.replication``) and the simulator (``sync.sim``) run the same
rules. Time comes in as ``now``; what to do comes back as typed actions (``sync.actions``, one
vocabulary); what a rule must read from storage it asks for (``ReadStored``, ``FetchDue``) and
the driver answers.

:class:`ReplicationCore` (``core``) is the one core a node drives: one timer, every input of
replication (a session's frames, charges and key-store reads among them: the core holds each
session's reconciliation), and the rules between its parts (module doc):

* :class:`ChannelSet` (``channels``, the core's ``channels``): the node's SDS channels and what
  enters them — gossip on its neighbour's budget, each item's step (``ReadLog`` when it needs
  the store), their timers, publishing, fetched events — and what they report, as actions.
* :class:`ReconLifecycle` (``lifecycle``, the core's ``sessions``): Recon sessions — when the
  next starts and with whom, backoff, which backlog range a session owns and giving it back
  when it fails, which side fetches first, whether another follows at once; the claims of
  the transfer (what to fetch, what the log already holds, what a peer withheld); a failed
  session's penalty by its kind.
* :class:`GapPlanner` (``gaps``, the core's ``gaps``): how SDS repair, fetch-by-id and Recon
  divide the work of closing a gap.

Beside it, ``ingest`` (:func:`screen`, :func:`order`, :func:`plan`): triage of verified events
from outside — invalid, refused by policy, own echo, settled (bulk) or the full SDS step — in
causal order, with counts and penalties. One path whoever verified the batch.

Driving it (what ``node.replication.driver`` does; a simulator does the same with its network
model)::

    node = ReplicationCore(ReconLifecycle(my_id, interests, random.Random(seed),
                                          LifecycleConfig()), GapPlanner(...),
                           ExchangeSetup(keys, ReconConfig(), max_missing_keys=10_000),
                           ChannelSet.of({"chat": channel}, my_id, network_id))
    # whenever now >= node.get_timer():
    for action in node.handle_timer(now, connected_peers, latencies):  # peer -> round trip, s
        ...  # StartSession(peer) -> open a session; FetchDue -> plan_fetch, fetch, fetched;
             # Penalize/ClaimsLapsed -> standing/metrics
    plan = node.begin(peer, Role.INITIATOR, now)        # None: not now (BUSY if responder)
    actions = node.start(plan)                          # then per frame of the peer:
    actions = node.receive(plan, frame, now)            # SendFrame, Charge -> node.charged,
                                                        # ReadKeys -> node.keys_read, ...
    ...  # until Reconciled: node.reconciled(plan); or Declined: node.declined(plan)
    actions = node.want(plan, now, wall_ms)             # ends with ReadStored(ticket)
    keys = node.sessions.stored(ticket, held_keys)      # what to fetch
    ...  # per answer: node.sessions.delivered(ticket, keys, now), .answer_done(ticket, withheld)
    node.sessions.close(plan)                           # end of the fetch phase
    more = node.finished(plan)                          # or:
    actions = node.failed(plan, peer, role, error, now) # range given back, backoff
    # and from the store: node.queued(keys); stored, fetched = node.committed(keys, new)

Penalties and metric labels follow from ``sync.errors.ErrorKind`` by table lookup
(``sync.peerscore.penalty_of``; the label is ``kind.value``). docs/replication.md has the design.
"""

from __future__ import annotations

# The action vocabulary (sync/actions.py), re-exported whole: one list of its names, there.
from sync import actions as _actions
from sync.actions import *  # noqa: F403
from sync.replication.channels import MAX_READS, ChannelSet, Published
from sync.replication.core import ExchangeSetup, ReplicationCore
from sync.replication.gaps import FETCH_GRACE_S, FetchPlan, GapPlanner
from sync.replication.ingest import (
    IngestOutcome,
    IngestPlan,
    ingest_batch,
    ingest_reads,
    order,
    plan,
    screen,
    sds_penalty,
)
from sync.replication.lifecycle import LifecycleConfig, ReconLifecycle, SessionPlan

__all__ = [
    *_actions.__all__,
    "ChannelSet",
    "ExchangeSetup",
    "FETCH_GRACE_S",
    "FetchPlan",
    "GapPlanner",
    "IngestOutcome",
    "IngestPlan",
    "LifecycleConfig",
    "MAX_READS",
    "Published",
    "ReconLifecycle",
    "ReplicationCore",
    "SessionPlan",
    "ingest_batch",
    "ingest_reads",
    "order",
    "plan",
    "screen",
    "sds_penalty",
]
