"""A neighbour's gossip budget is charged when its messages came off its stream, not when the
node's channel loop got to them.

A node busy storing a burst falls behind in its channel loop while the messages wait in its
subscriber queue; charged at the loop's time, a burst the publisher paced to 80 % of our
budget (``sync.gossip.GossipPace``) arrived in one clump and was refused as over budget, and
the publisher was banned (tests/node/test_publish_burst_pace.py failed so on a loaded CI run:
145 events refused, one ban). The host stamps each message as its topic validator reads it
(``GossipMessage.received_at``) and the channel service charges by that stamp.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from trio.testing import MockClock

from node.clock import SystemClock
from node.p2p import GossipMessage, P2PConfig
from node.p2p.run import open_host
from node.replication.clock import TrioWallClock
from node.store.events import EventStore
from node.telemetry.metrics import Metrics
from storage import make_engine, upgrade
from sync.gossip import GossipLimits
from sync.identity import peer_id_of
from sync.sds import SdsChannel, SdsConfig
from tests.harness.channels import channel_service
from tests.harness.cluster import until

T0 = 1_000_000.0
LIMITS = GossipLimits()  # the defaults: 1,000 events/s in bursts of 5,000
PACE = 0.8 * LIMITS.peer_rate  # what the publisher's own pace lets out
EVENTS = int(LIMITS.peer_burst * 1.2)  # more than one burst's worth
OVER_BUDGET = {"reason": "over gossip budget"}


def _received(tmp_path: Path, stamps: list[float]) -> Metrics:
    """A channel service on the default gossip limits takes EVENTS messages from one
    publisher, stamped as read off its stream at ``stamps``, all of them only once its loop
    gets to them, after the last has arrived (a second later)."""
    tmp_path.mkdir()
    engine = make_engine(f"sqlite:///{tmp_path / 'node.db'}")
    upgrade(engine)
    key, publisher_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    publisher_id = peer_id_of(publisher_key)
    metrics = Metrics()
    mock = MockClock()

    async def main() -> None:
        clock = TrioWallClock(T0)
        service = channel_service(EventStore(engine), metrics, peer_id_of(key), {
            "c": SdsChannel("c", peer_id_of(key), key, SdsConfig(), random.Random(1),
                            clock.wall())}, clock)
        publisher = SdsChannel("c", publisher_id, publisher_key, SdsConfig(), random.Random(2),
                               T0)
        send, receive = trio.open_memory_channel[object](len(stamps))
        for i, at in enumerate(stamps):
            wire = publisher.send(b"event %d" % i, at)
            publisher.events()
            send.send_nowait(GossipMessage(topic="t", from_peer=publisher_id, data=wire,
                                           seqno=i, forwarder=publisher_id, received_at=at))
        send.close()
        mock.jump(max(stamps) - T0 + 1.0)  # the loop fell behind
        assert clock.wall() > max(stamps)
        await service._gossip_loop("c", receive)

    trio.run(main, clock=mock)
    return metrics


def test_a_paced_burst_the_loop_took_late_is_charged_as_it_arrived(tmp_path: Path) -> None:
    paced = [T0 + i / PACE for i in range(EVENTS)]
    metrics = _received(tmp_path / "paced", paced)
    assert metrics.value("events_rejected_total", **OVER_BUDGET) == 0
    assert metrics.value("events_delivered_total", channel="c") == EVENTS


def test_a_burst_that_arrived_at_once_is_still_over_budget(tmp_path: Path) -> None:
    """The budget itself is unchanged: the same events read off the stream in one instant
    are over it by what exceeds the burst."""
    metrics = _received(tmp_path / "clump", [T0] * EVENTS)
    assert metrics.value("events_rejected_total", **OVER_BUDGET) == EVENTS - LIMITS.peer_burst


class _Shifted(SystemClock):
    """The system clock, its wall time moved on by hand (a mock clock for the wall only)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def wall(self) -> float:
        return super().wall() + self.offset


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_the_host_stamps_a_message_when_it_is_read_not_when_it_is_taken() -> None:
    """Two real hosts: a message that waited in the subscriber queue keeps the time its host
    read it off the stream."""
    clock = _Shifted()
    keys = [Ed25519PrivateKey.generate() for _ in range(2)]
    async with open_host(keys[0], P2PConfig(), clock=SystemClock()) as sender, \
            open_host(keys[1], P2PConfig(), clock=clock) as receiver:
        inbox = await receiver.subscribe("t")
        await sender.subscribe("t")
        await sender.connect(receiver.listen_addrs[0])
        await until(lambda: receiver.peer_id in sender.gossip_peers("t"), 30,
                    "the receiver's subscription was not seen")
        before = clock.wall()
        received = receiver.stats.gossip_received
        await sender.publish("t", b"waits in the queue")
        await until(lambda: receiver.stats.gossip_received > received, 30,
                    "the message did not arrive")
        read_at = clock.wall()
        clock.offset += 60.0  # the consumer gets to it a minute later
        message = await inbox.receive()
    assert message.data == b"waits in the queue"
    assert message.received_at is not None and before <= message.received_at <= read_at
