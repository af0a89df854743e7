"""Gossip batching policy: hold messages back only while more are due within the linger."""

from __future__ import annotations

from sync.linger import Linger


def test_quiet_node_sends_at_once() -> None:
    linger = Linger(0.1)
    linger.note(10.0)
    assert linger.delay(10.0) == 0.0  # the first message ever
    for i in range(1, 20):  # one message every 0.5 s: nothing to batch
        linger.note(10.0 + 0.5 * i)
        assert linger.delay(10.0 + 0.5 * i) == 0.0


def test_busy_node_lingers_then_recovers_after_a_pause() -> None:
    linger = Linger(0.1)
    now = 0.0
    delays = []
    for _ in range(30):  # 50 messages/s
        now += 0.02
        linger.note(now)
        delays.append(linger.delay(now))
    assert delays[-1] == 0.1
    assert delays[0] == 0.0  # one gap of 0.02 s after an infinite one: no history yet
    # After a quiet second the next message goes out at once, whatever the average was.
    assert linger.delay(now + 1.0) == 0.0
    now += 6.0
    linger.note(now)
    assert linger.delay(now) == 0.0


def test_average_follows_a_slowdown() -> None:
    linger = Linger(0.1)
    now = 0.0
    for _ in range(30):
        now += 0.02
        linger.note(now)
    for _ in range(30):  # now one every 0.3 s
        now += 0.3
        linger.note(now)
    assert linger.delay(now) == 0.0


def test_zero_linger_never_waits() -> None:
    linger = Linger(0.0)
    for i in range(10):
        linger.note(i * 0.001)
    assert linger.delay(0.01) == 0.0


def test_a_full_batch_queued_goes_at_once() -> None:
    """Issue 31: a batch publish queues more than one gossip message holds; lingering before
    each of them capped a node at one gossip message per linger."""
    linger = Linger(0.3)
    for _ in range(200):  # a batch publish: 200 messages at the same instant
        linger.note(5.0)
    assert linger.delay(5.0) == 0.3
    assert linger.delay(5.0, batch_full=True) == 0.0
