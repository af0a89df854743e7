"""Two per-message costs of py-libp2p 0.8.1's GossipSub router, removed per router (entries G2,
G3 of the table in ``node.p2p.compat``).

G2, *score gates that cannot refuse.* Every message published or forwarded asks the peer
scorer, per peer, ``allow_publish`` (in ``Pubsub.push_msg`` and ``GossipSub.publish``),
``allow_gossip`` and ``is_graylisted`` (in ``_get_peers_to_send``); each computes the peer's
topic score (four weighted counters, the behaviour penalties, the colocation penalty) and
compares it with a threshold. With a threshold of ``-inf`` (the default of all three, and
ours) the answer is fixed: a finite score is always ``>= -inf`` and never ``< -inf``. The gates
here answer without the score while the threshold is ``-inf`` and every weight is finite (so
is every score: finite counters times finite weights, no application score function), and
ask the scorer otherwise; the counters the score is made of are kept as before.

G3, *an RPC split that does nothing.* ``GossipSub.send_rpc`` copies each RPC per peer,
splits the copy to the queue's size limit (``RpcQueue.split_rpc``: the byte size of every
message, then of the rest) and measures each part once more: four or more serializations of a
1.7 KB message, the largest single cost of the send path. A publish-only RPC (no
subscriptions, no control: every message forwarded) whose size is within the limit is split
into itself, so here it is queued as the copy after one size check; any other RPC, or one for
a peer with control waiting to ride along (``_pending_control``), takes 0.8.1's path.

G4, *GossipSub 1.2 and 1.3 work for a router that speaks neither.* ``GossipSub.publish`` awaits
``_emit_idontwant_for_message`` (IDONTWANT to v1.2+ mesh peers) and ``_notify_observers``
(IHAVE to v1.3 topic observers) for every message: each builds sets of peers to find none
when the router offers only ``/meshsub/1.1.0`` and ``/meshsub/1.0.0`` (ours), since a peer's
protocol is one the router offered and OBSERVE is honoured from v1.3 peers only. Here both
return at once while the router offers no v1.2+ protocol.
"""

from __future__ import annotations

import math
from typing import Any

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import (
    PROTOCOL_ID_V12,
    PROTOCOL_ID_V13,
    PROTOCOL_ID_V14,
    PROTOCOL_ID_V20,
    GossipSub,
)
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.score import PeerScorer

from node.p2p.compat.version import require

__all__ = ["quicken_router"]

_WEIGHTED = ("p1_time_in_mesh", "p2_first_message_deliveries", "p3_mesh_message_deliveries",
             "p4_invalid_messages")


def _scores_are_finite(scorer: PeerScorer) -> bool:
    p = scorer.params
    weights = [getattr(p, name).weight for name in _WEIGHTED]
    weights += [p.p5_behavior_penalty_weight, p.p6_appl_slack_weight, p.p7_ip_colocation_weight]
    caps = [getattr(p, name).cap for name in _WEIGHTED]
    return (p.app_specific_score_fn is None and all(math.isfinite(w) for w in weights)
            and all(math.isfinite(c) for c in caps))


def quicken_gates(scorer: PeerScorer) -> bool:
    """G2 on ``scorer`` (its own gate methods); False, and nothing changed, when its params
    could make a score that is not finite."""
    require(scorer, "allow_publish", "allow_gossip", "is_graylisted", "params")
    if not _scores_are_finite(scorer):
        return False
    params = scorer.params
    allow_publish, allow_gossip = scorer.allow_publish, scorer.allow_gossip
    is_graylisted = scorer.is_graylisted
    inf = -math.inf

    # ``not topics`` keeps 0.8.1's answer for an empty topic list (refused, not graylisted).
    def publish_gate(peer: ID, topics: list[str]) -> bool:
        if params.publish_threshold == inf and topics:
            return True
        return allow_publish(peer, topics)

    def gossip_gate(peer: ID, topics: list[str]) -> bool:
        if params.gossip_threshold == inf and topics:
            return True
        return allow_gossip(peer, topics)

    def graylist_gate(peer: ID, topics: list[str]) -> bool:
        if params.graylist_threshold == inf:
            return False
        return is_graylisted(peer, topics)

    scorer.allow_publish = publish_gate  # type: ignore[method-assign]
    scorer.allow_gossip = gossip_gate  # type: ignore[method-assign]
    scorer.is_graylisted = graylist_gate  # type: ignore[method-assign]
    return True


def quicken_sends(router: GossipSub) -> None:
    """G3 on ``router``: a publish-only RPC within the queue's limit is queued unsplit."""
    require(router, "send_rpc", "_pending_control", "_handle_dropped_rpc", "pubsub")
    original = router.send_rpc

    def send_rpc(peer_id: ID, rpc: rpc_pb2.RPC, priority: bool = False) -> None:
        pubsub: Any = router.pubsub
        queue = None if pubsub is None else pubsub.peer_queues.get(peer_id)
        if (queue is None or rpc.subscriptions or rpc.HasField("control")
                or peer_id in router._pending_control):
            original(peer_id, rpc, priority)
            return
        outbound = rpc_pb2.RPC()
        outbound.CopyFrom(rpc)  # per peer, as 0.8.1: the writer may clear its record (R3)
        if outbound.ByteSize() > queue.max_message_size:
            original(peer_id, rpc, priority)
            return
        if not queue.push(outbound, priority=priority):
            router._handle_dropped_rpc(peer_id, outbound, "queue_full")

    router.send_rpc = send_rpc  # type: ignore[method-assign]


V12_PLUS = frozenset((PROTOCOL_ID_V12, PROTOCOL_ID_V13, PROTOCOL_ID_V14, PROTOCOL_ID_V20))


def skip_unspoken_extensions(router: GossipSub) -> None:
    """G4 on ``router``: no IDONTWANT or observer work while it offers no v1.2+ protocol."""
    require(router, "_emit_idontwant_for_message", "_notify_observers", "protocols")
    emit_idontwant = router._emit_idontwant_for_message
    notify_observers = router._notify_observers

    def speaks_v12(protocols: Any) -> bool:
        return any(p in V12_PLUS for p in protocols)

    async def idontwant(msg_id: bytes, topic_ids: Any) -> None:
        if speaks_v12(router.protocols):
            await emit_idontwant(msg_id, topic_ids)

    async def observers(topic_ids: Any, msg_id: bytes) -> None:
        if speaks_v12(router.protocols):
            await notify_observers(topic_ids, msg_id)

    router._emit_idontwant_for_message = idontwant  # type: ignore[method-assign]
    router._notify_observers = observers  # type: ignore[method-assign]


def quicken_router(router: GossipSub) -> None:
    """G2 (when the router has a scorer), G3 and G4 on one router."""
    if router.scorer is not None:
        quicken_gates(router.scorer)
    quicken_sends(router)
    skip_unspoken_extensions(router)
