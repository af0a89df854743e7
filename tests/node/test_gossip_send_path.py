"""The per-message cost of py-libp2p 0.8.1's GossipSub send path, cut in ``node.p2p.compat``
(entries G2, G3, G4 in ``compat/router.py``): counted on real hosts, never timed.

- G2: no peer score is computed for a gate whose threshold is ``-inf`` (it admits every score);
  a threshold that can refuse still refuses.
- G3: a publish-only RPC within the size limit is queued without ``RpcQueue.split_rpc``, which
  would return it unchanged; any other RPC is still split.
- G4: no IDONTWANT or topic-observer work for a router that offers no v1.2+ protocol.

The only wrappers count calls and call through.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import RpcQueue
from libp2p.pubsub.score import PeerScorer

from node.p2p import P2PHost
from tests.harness.gossip_pair import meshed_pair, send_one_by_one

TOPIC = "send-path"


def _meshed() -> Any:
    return meshed_pair(TOPIC)


async def _send(sender: P2PHost, inbox: Any, count: int) -> None:
    await send_one_by_one(sender, inbox, TOPIC, count)


def _router(host: P2PHost) -> GossipSub:
    router: GossipSub = host._gossip._router
    return router


class _Counted:
    """Counts the calls of one method of a libp2p class (wrapped, still run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
        self.count = 0
        original = getattr(owner, name)

        def counted(obj: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(obj, *args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


@pytest.mark.trio
@pytest.mark.timeout(90)
async def test_g2_no_score_is_computed_for_gates_that_admit_every_score(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the default settings (every threshold ``-inf``) a message costs no score computation
    (0.8.1: about seven per message for one peer); the counters the score is made of still
    move; a gossip threshold the peer's score is below then keeps the message from it."""
    scores = _Counted(monkeypatch, PeerScorer, "topic_score")
    async with _meshed() as (sender, receiver, inbox):
        scores.count = 0
        await _send(sender, inbox, 20)
        assert scores.count == 0
        scorer = _router(receiver).scorer
        assert scorer is not None
        sender_id = ID.from_base58(sender.peer_id)
        assert scorer.first_message_deliveries[sender_id][TOPIC] > 0
        # A threshold that can refuse: the sender's gate asks the score again, and refuses.
        sender_scorer = _router(sender).scorer
        assert sender_scorer is not None
        sender_scorer.params.gossip_threshold = math.inf
        await sender.publish(TOPIC, b"refused")
        with trio.move_on_after(1.0):
            await inbox.receive()
            raise AssertionError("a refusing gossip gate let the message through")
        assert scores.count > 0


def test_g2_a_scorer_whose_scores_may_not_be_finite_keeps_its_gates() -> None:
    """With an infinite weight a score can be NaN, which 0.8.1's gates refuse: left as is."""
    from libp2p.pubsub.score import ScoreParams, TopicScoreParams

    from node.p2p.compat.router import quicken_gates

    scorer = PeerScorer(ScoreParams(p1_time_in_mesh=TopicScoreParams(weight=math.inf)))
    assert not quicken_gates(scorer)
    assert "allow_publish" not in vars(scorer)
    default = PeerScorer(ScoreParams())
    assert quicken_gates(default)
    peer = ID(b"\x00\x01x")
    assert default.allow_publish(peer, ["t"]) and default.allow_gossip(peer, ["t"])
    assert not default.is_graylisted(peer, ["t"])
    assert not default.allow_publish(peer, [])  # 0.8.1's answer for no topic


def test_g3_the_split_it_skips_returns_a_fitting_publish_rpc_unchanged() -> None:
    """The contract G3 relies on: 0.8.1's ``split_rpc`` of a publish-only RPC within the limit
    (with a sender record) is that RPC; with control beside it, it is split."""
    queue = RpcQueue(max_size=4)
    rpc = rpc_pb2.RPC(senderRecord=b"r" * 300)
    for i in range(3):
        rpc.publish.add(data=bytes(1_700), seqno=bytes([i]), topicIDs=["t"], signature=b"s" * 64)
    assert queue.split_rpc(rpc) == [rpc]
    with_control = rpc_pb2.RPC()
    with_control.CopyFrom(rpc)
    with_control.control.graft.add(topicID="t")
    assert len(queue.split_rpc(with_control)) == 2


@pytest.mark.trio
@pytest.mark.timeout(90)
async def test_g3_publish_rpcs_are_queued_unsplit_and_others_still_split(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages published and forwarded take no ``split_rpc`` (0.8.1: one per peer and
    message, with four serializations of it); an RPC carrying control still is split, and an
    RPC over the queue's limit still is dropped as oversized."""
    splits = _Counted(monkeypatch, RpcQueue, "split_rpc")
    async with _meshed() as (sender, receiver, inbox):
        splits.count = 0
        await _send(sender, inbox, 20)
        assert splits.count == 0
        router = _router(sender)
        peer = ID.from_base58(receiver.peer_id)
        control = rpc_pb2.RPC()
        control.control.ihave.add(topicID=TOPIC, messageIDs=[b"x"])
        router.send_rpc(peer, control)
        assert splits.count == 1
        queue = router.pubsub.peer_queues[peer]  # type: ignore[union-attr]
        monkeypatch.setattr(queue, "max_message_size", 1_000)
        before = splits.count
        await sender.publish(TOPIC, b"big" + bytes(1_700))
        assert splits.count == before + 1  # 0.8.1's path: split, then dropped as oversized
        monkeypatch.undo()
        with trio.move_on_after(1.0):
            message = await inbox.receive()
            raise AssertionError(f"an oversized RPC was sent: {message.data[:3]!r}")


@pytest.mark.trio
@pytest.mark.timeout(90)
async def test_g4_no_idontwant_or_observer_work_without_v12(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's router offers /meshsub/1.1.0 and 1.0.0: a message costs no IDONTWANT or
    observer scan (0.8.1: both per message); offering v1.2 brings both back."""
    calls = {"idontwant": 0, "observers": 0}
    original_emit = GossipSub._emit_idontwant_for_message
    original_notify = GossipSub._notify_observers

    async def emit(self: GossipSub, *args: Any) -> None:
        calls["idontwant"] += 1
        await original_emit(self, *args)

    async def notify(self: GossipSub, *args: Any) -> None:
        calls["observers"] += 1
        await original_notify(self, *args)

    monkeypatch.setattr(GossipSub, "_emit_idontwant_for_message", emit)
    monkeypatch.setattr(GossipSub, "_notify_observers", notify)
    async with _meshed() as (sender, _receiver, inbox):
        await _send(sender, inbox, 10)
        assert calls == {"idontwant": 0, "observers": 0}
        assert PROTOCOL_ID_V12 not in _router(sender).protocols
        _router(sender).protocols.append(PROTOCOL_ID_V12)
        await _send(sender, inbox, 1)
        assert calls == {"idontwant": 1, "observers": 1}
