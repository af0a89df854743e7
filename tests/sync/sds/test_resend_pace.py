"""Resend pacing counts what is sent (docs/sds.md section 5): a resend is the wire plus this
node's filter and signature, ~1.2 KB beside a small event's ~0.3 KB wire, so a pace counted on
the wires let a 5,000-event burst's resends all fall due in one tick, ~9 MB of datagrams held
at once by the gossip queue, the high-water mark of a node's heap after each burst."""

from __future__ import annotations

from sync.sds import SdsConfig
from tests.sync.sds.helpers import T0, channel

BURST = 3_000


def _resends_in_one_tick(config: SdsConfig) -> tuple[int, int]:
    """(datagrams, their bytes) that a burst nobody acknowledged produces at its first resend
    deadline, on a fixed clock."""
    ch = channel(0, config=config)
    for i in range(BURST):
        ch.send(f"event {i} ".encode() + b"x" * 40, T0)
    # past any adaptive timeout
    sent = ch.handle_timer(T0 + 3 * config.resend_interval)
    return len(sent), sum(map(len, sent))


def test_resend_pace_counts_the_bytes_sent_not_the_wires() -> None:
    pace = 1 << 20
    count, nbytes = _resends_in_one_tick(SdsConfig(resend_bytes_per_s=pace))
    assert 0 < count < BURST
    largest = nbytes // count * 2  # one datagram may overshoot the pace
    assert nbytes <= pace + largest, (count, nbytes)


def test_default_pace_holds_a_bursts_resends_to_about_a_mebibyte() -> None:
    config = SdsConfig()
    count, nbytes = _resends_in_one_tick(config)
    assert 0 < count < BURST
    assert nbytes <= config.resend_bytes_per_s + 4096 <= (1 << 20) + 4096, (count, nbytes)


def test_deferred_resends_go_in_later_seconds() -> None:
    config = SdsConfig(resend_bytes_per_s=256 << 10)
    ch = channel(0, config=config)
    for i in range(BURST):
        ch.send(f"event {i}".encode(), T0)
    start, total = T0 + 3 * config.resend_interval, 0
    for second in range(60):
        sent = ch.handle_timer(start + second)
        assert sum(map(len, sent)) <= config.resend_bytes_per_s + 4096
        total += len(sent)
    assert total >= BURST  # every one resent, a pace's worth a second
    assert ch.layers.outgoing.deferred > 0
