"""Bounded SDS buffers (attack 4): waiting buffer and missing set per channel and per sender,
in count and bytes, evictions reported; the repair cache bounded in bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.sds import Delivered, Evicted, HistoryRef, SdsConfig, decode_event, encode_event
from sync.sds.quota import QuotaLimits, SenderQuota
from sync.sds.state import encode_state
from tests.sync.sds.helpers import CHANNEL, T0, channel, key, of_type

CONFIG = SdsConfig(
    max_message_size=64 * 1024,
    max_waiting=8, max_waiting_bytes=400 * 1024,
    max_waiting_per_sender=4, max_waiting_bytes_per_sender=200 * 1024,
    max_missing=20, max_missing_per_sender=10,
    repair_cache_bytes=100 * 1024,
)
NOW_MS = int(T0 * 1000)


def orphan(sender: int, i: int, size: int = 10, deps: int = 1) -> bytes:
    """A signed message waiting on dependencies nobody has."""
    history = tuple(HistoryRef(f"{'f' * 40}{sender:04d}{i:06d}{d:04d}") for d in range(deps))
    ch = channel(sender)
    return encode_event(CHANNEL, ch.setup.participant_id, NOW_MS + i, history,
                        bytes([65 + i % 26]) * size, key(sender)).wire


def test_waiting_buffer_is_bounded_per_sender_in_count() -> None:
    victim = channel(0, config=CONFIG)
    wires = [orphan(1, i) for i in range(10)]
    for wire in wires:
        victim.receive(wire, T0)
    assert len(victim.layers.incoming.waiting_ids) == 4
    evicted = of_type(victim.events(), Evicted)
    assert [e.buffer for e in evicted].count("waiting") == 6
    # The newest stay: the flooder's own oldest went first.
    assert victim.layers.incoming.waiting_ids == {decode_event(w).message_id for w in wires[-4:]}
    assert all(e.sender_id == channel(1).setup.participant_id for e in evicted
               if e.buffer == "waiting")


def test_waiting_buffer_is_bounded_per_sender_in_bytes_and_other_senders_keep_theirs() -> None:
    victim = channel(0, config=CONFIG)
    honest = [orphan(2, i) for i in range(2)]
    for wire in honest:
        victim.receive(wire, T0)
    honest_ids = set(victim.layers.incoming.waiting_ids)
    for i in range(6):  # 6 x 60 KB from one sender: over its 200 KB (wire + content)
        victim.receive(orphan(1, i, size=60 * 1024), T0)
    assert honest_ids <= victim.layers.incoming.waiting_ids
    assert victim.layers.incoming.buffer.waiting_quota.bytes <= CONFIG.max_waiting_bytes
    flooder = len(victim.layers.incoming.waiting_ids - honest_ids)
    assert flooder == 1  # two of them (wire + content ~ 2 x 60 KB each) do not fit in 200 KB


def test_waiting_buffer_is_bounded_per_channel() -> None:
    victim = channel(0, config=CONFIG)
    for sender in range(1, 6):
        for i in range(3):
            victim.receive(orphan(sender, i), T0)
    assert len(victim.layers.incoming.waiting_ids) == CONFIG.max_waiting


def test_evicted_waiting_message_is_accepted_again_and_delivered() -> None:
    victim = channel(0, config=CONFIG)
    author = channel(3, config=CONFIG)
    first = author.send(b"dependency", T0)
    second = author.send(b"depends on the first", T0)
    victim.receive(second, T0)
    for i in range(10):  # push it out
        victim.receive(orphan(3, 100 + i), T0)
    dependant = of_type(author.events(), Delivered)[1].message_id
    assert dependant not in victim.layers.incoming.waiting_ids
    victim.events()
    victim.receive(first, T0)
    victim.receive(second, T0)
    assert dependant in {d.message_id for d in of_type(victim.events(), Delivered)}


def test_missing_set_is_bounded_per_sender_and_per_channel() -> None:
    victim = channel(0, config=CONFIG)
    for i in range(5):  # sync messages naming 8 fake ids each
        wire = encode_event(CHANNEL, channel(1).setup.participant_id, NOW_MS + i,
                            tuple(HistoryRef(f"{i:02d}{'e' * 60}{d:02d}") for d in range(8)),
                            b"", key(1)).wire
        victim.receive(wire, T0)
    assert len(victim.layers.incoming.missing_ids) == CONFIG.max_missing_per_sender
    for sender in range(2, 6):
        victim.receive(orphan(sender, 0, deps=8), T0)
    assert len(victim.layers.incoming.missing_ids) <= CONFIG.max_missing
    evicted = [e for e in of_type(victim.events(), Evicted) if e.buffer == "missing"]
    assert len(evicted) == 5 * 8 + 4 * 8 - len(victim.layers.incoming.missing_ids)
    # Evicted entries are no longer requested for repair.
    assert victim.layers.repair.request_ids <= victim.layers.incoming.missing_ids


def test_repair_cache_is_bounded_in_bytes() -> None:
    author = channel(1, config=CONFIG)
    for i in range(10):
        author.send(bytes([i + 1]) * (30 * 1024), T0)
    assert author.layers.repair.cache_bytes <= CONFIG.repair_cache_bytes
    assert len(author.layers.repair.cache) == 3
    repair = author.layers.repair
    assert repair.cache_bytes == sum(len(w) for _, w in repair.cache.values())


def test_bounds_survive_export_and_restore() -> None:
    victim = channel(0, config=CONFIG)
    for i in range(4):
        victim.receive(orphan(1, i), T0)
    state = encode_state(victim.snapshot())
    small = SdsConfig(**{**CONFIG.__dict__, "max_waiting": 2, "max_waiting_per_sender": 2})
    restored = type(victim).restore(state, key(0), config=small, now=T0)
    assert len(restored.layers.incoming.waiting_ids) == 2
    assert restored.layers.incoming.buffer.waiting_quota.bytes == sum(
        len(w.event.wire) + len(w.event.content) for w in restored.layers.incoming.waiting.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 50)), max_size=200))
def test_quota_never_exceeds_its_limits(ops: list[tuple[int, int]]) -> None:
    limits = QuotaLimits(max_entries=12, max_bytes=200, max_entries_per_sender=5,
                         max_bytes_per_sender=80)
    quota = SenderQuota(limits)
    held: dict[str, tuple[str, int]] = {}
    for n, (sender, size) in enumerate(ops):
        key_ = f"k{n}"
        if not quota.fits(size):
            continue
        for old in quota.add(key_, str(sender), size):
            del held[old]
        held[key_] = (str(sender), size)
        assert len(quota) == len(held) <= limits.max_entries
        assert quota.bytes == sum(s for _, s in held.values()) <= limits.max_bytes
        for who in {s for s, _ in held.values()}:
            mine = [s for s2, s in held.values() if s2 == who]
            assert len(mine) <= limits.max_entries_per_sender
            assert sum(mine) <= limits.max_bytes_per_sender
