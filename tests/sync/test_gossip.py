"""The gossip gate (sync.gossip): batch format, per-publisher budget, sender rules; fixed clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.errors import ErrorKind, RemoteProtocolError
from sync.gossip import (
    BATCH_MAGIC,
    MAX_BATCH_BYTES,
    MAX_BATCH_ITEMS,
    REASON_BUDGET,
    REASON_NOT_MEMBER,
    REASON_NOT_WRITER,
    Admitted,
    GossipGate,
    GossipLimits,
    GossipPace,
    OutgoingBatch,
    SenderCheck,
    SenderPolicy,
    pack_batch,
    publisher_pays,
    unpack_batch,
)
from sync.peerscore import KIND_PENALTIES, penalty_of
from sync.sds import encode_event
from tests.sync.sds.helpers import T0, channel, key

ME, A, B = (channel(i).setup.participant_id for i in range(3))


def rejected(admitted: Admitted) -> list[tuple[str, str | None]]:
    """(reason text without detail, penalty) per rejection."""
    return [(e.reason.split(":")[0], p) for e, p in admitted.rejected]


def event(i: int, content: bytes = b"x", ch: str = "general", lamport: int = 1) -> bytes:
    return encode_event(ch, channel(i).setup.participant_id, lamport, (), content, key(i)).wire


@given(st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=MAX_BATCH_ITEMS))
def test_batch_round_trip(items: list[bytes]) -> None:
    items = [b"\x0a" + i for i in items]  # protobuf-looking: never starts with a zero byte
    assert unpack_batch(pack_batch(items), max_item_bytes=1024) == items


@pytest.mark.parametrize("data", [
    BATCH_MAGIC,  # no items
    BATCH_MAGIC + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # bad varint
    BATCH_MAGIC + b"\x05abc",  # truncated
    BATCH_MAGIC + b"\x00",  # empty item
    BATCH_MAGIC + b"\x10" + b"x" * 16,  # over max_item_bytes
    BATCH_MAGIC + b"\x01x" * (MAX_BATCH_ITEMS + 1),  # too many items
])
def test_bad_batches_are_remote_protocol_errors(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as err:
        unpack_batch(data, max_item_bytes=8)
    assert err.value.reason.startswith("bad gossip batch")
    assert err.value.kind is ErrorKind.BAD_BATCH
    assert penalty_of(err.value.kind) == "protocol"


def test_plain_message_is_one_item() -> None:
    assert unpack_batch(b"\x0aabc", max_item_bytes=8) == [b"\x0aabc"]


def test_closed_group_and_writers_decide_on_the_sender_alone() -> None:
    policy = SenderPolicy(ME, frozenset({ME, A}), {"blocks": frozenset({A})})
    assert policy.check(ME, "general", True) is SenderCheck.OWN
    assert policy.check(A, "general", True) is SenderCheck.ACCEPT
    with pytest.raises(RemoteProtocolError, match=REASON_NOT_MEMBER):
        policy.check(B, "general", True)
    open_policy = SenderPolicy(ME, None, {"blocks": frozenset({A})})
    assert open_policy.check(B, "general", True) is SenderCheck.ACCEPT
    with pytest.raises(RemoteProtocolError, match=REASON_NOT_WRITER):
        open_policy.check(B, "blocks", True)
    # Sync messages (no content) carry acknowledgements: anyone in the group may send them.
    assert open_policy.check(B, "blocks", False) is SenderCheck.ACCEPT


def test_gate_drops_unlisted_senders_before_the_signature() -> None:
    gate = GossipGate(SenderPolicy(ME, frozenset({ME, A})))
    forged = bytearray(event(2))
    forged[-1] ^= 1  # a bad signature would cost a check; the sender alone decides first
    admitted = gate.admit(pack_batch([event(1), bytes(forged), event(0)]), A, T0)
    assert admitted.items == [event(1), event(0)]
    assert rejected(admitted) == [(REASON_NOT_MEMBER, "rejected_event")]


def test_budget_throttles_a_flooding_publisher_not_the_others() -> None:
    gate = GossipGate(SenderPolicy(ME), GossipLimits(peer_rate=10, peer_burst=20))
    flood = [event(i % 2 + 1, f"flood {i}".encode()) for i in range(MAX_BATCH_ITEMS)]
    admitted = gate.admit(pack_batch(flood), "flooder", T0)
    assert len(admitted.items) == 20
    assert rejected(admitted) == [(REASON_BUDGET, "flood")] * (MAX_BATCH_ITEMS - 20)
    # An honest publisher at the same moment has its own budget.
    honest = gate.admit(pack_batch([event(1, b"honest")] * 5), "honest", T0)
    assert len(honest.items) == 5 and not honest.rejected
    # The flooder's budget refills at its rate, no faster.
    assert len(gate.admit(pack_batch(flood[:30]), "flooder", T0 + 1).items) == 10


def test_big_items_cost_more_tokens() -> None:
    gate = GossipGate(SenderPolicy(ME), GossipLimits(peer_rate=1, peer_burst=4))
    big = event(1, b"x" * (200 * 1024))
    assert len(gate.admit(big, "p", T0).items) == 1  # 1 + 3 tokens
    assert rejected(gate.admit(event(1), "p", T0)) == [(REASON_BUDGET, "flood")]


def test_undecodable_item_costs_an_invalid_event_penalty() -> None:
    admitted = GossipGate(SenderPolicy(ME)).admit(b"\xff\xff\xff", "p", T0)
    assert admitted.items == [] and admitted.rejected[0][1] == "invalid_event"


def test_penalties_by_kind() -> None:
    assert penalty_of(ErrorKind.BAD_SIGNATURE) == "invalid_event"
    assert penalty_of(ErrorKind.LAMPORT_AHEAD) == "rejected_event"
    assert penalty_of(ErrorKind.OVER_BUDGET) == "flood"
    assert set(KIND_PENALTIES) == set(ErrorKind)  # every kind is priced


def test_a_relay_of_somebodys_flood_is_throttled_but_does_not_pay() -> None:
    gate = GossipGate(SenderPolicy(ME), GossipLimits(peer_rate=1, peer_burst=10))
    flood = [event(2, f"flood {i}".encode()) for i in range(30)]
    relayed = gate.admit(pack_batch(flood), "relay", T0, publisher="flooder")
    assert len(relayed.items) == 10
    assert rejected(relayed) == [(REASON_BUDGET, None)] * 20  # counted, no penalty
    # The relay's own messages are now throttled with it (its neighbour bucket is empty) ...
    own = gate.admit(event(1, b"the relay's own"), "relay", T0, publisher="relay")
    assert own.items == [] and rejected(own) == [(REASON_BUDGET, None)]
    # ... but only a peer flooding with its own messages pays.
    direct = gate.admit(pack_batch(flood), "flooder", T0, publisher="flooder")
    assert (REASON_BUDGET, "flood") in rejected(direct)


def test_own_sync_messages_over_budget_are_throttled_without_a_penalty() -> None:
    # A node whose buffers are under attack sends acknowledgements and repair requests in
    # bursts; its honest neighbours must not ban it for that (they would cut it off).
    from sync.sds import sds_pb2

    gate = GossipGate(SenderPolicy(ME), GossipLimits(peer_rate=1, peer_burst=10))
    sync = sds_pb2.Message(sender_id=A, channel_id="general", message_id="s").SerializeToString()
    burst = gate.admit(pack_batch([sync] * 30), A, T0, publisher=A)
    assert len(burst.items) == 10
    assert rejected(burst) == [(REASON_BUDGET, None)] * 20
    # Its own content over the same budget is a flood and pays.
    content = gate.admit(pack_batch([event(1, b"e")] * 5), A, T0, publisher=A)
    assert content.items == [] and (REASON_BUDGET, "flood") in rejected(content)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.binary(min_size=1, max_size=3000)),
                min_size=1, max_size=200))
def test_outgoing_batches_stay_within_what_receivers_accept(
        queued: list[tuple[str, bytes]]) -> None:
    """Drained as the publish loop does: every message goes out once, per channel in order,
    and every payload unpacks within the receiving side's limits."""
    sent: dict[str, list[bytes]] = {}
    pending = list(queued)
    while pending:
        batch = OutgoingBatch()
        while pending and not batch.full:
            batch.add(*pending.pop(0))
        assert batch.count <= MAX_BATCH_ITEMS
        assert batch.size - max(len(d) for _, d in queued) < MAX_BATCH_BYTES
        for name, payload in batch.payloads():
            sent.setdefault(name, []).extend(unpack_batch(payload, max_item_bytes=3000))
    for name in sent:
        assert sent[name] == [d for c, d in queued if c == name]
    assert sum(map(len, sent.values())) == len(queued)


def test_an_item_that_looks_like_a_batch_goes_as_a_batch_of_one() -> None:
    """Found by the property above: b"\\x00SB1" alone was sent as is and read as an empty batch."""
    for item in (BATCH_MAGIC, BATCH_MAGIC + b"\x01x"):
        assert unpack_batch(pack_batch([item]), max_item_bytes=100) == [item]


def test_a_full_batch_takes_no_more() -> None:
    batch = OutgoingBatch()
    for _ in range(MAX_BATCH_ITEMS):
        batch.add("a", b"x")
    assert batch.full and batch.payloads()[0][1].startswith(BATCH_MAGIC)
    with pytest.raises(ValueError):
        batch.add("a", b"x")
    big = OutgoingBatch()
    big.add("a", bytes(MAX_BATCH_BYTES))
    assert big.full and big.payloads() == [("a", bytes(MAX_BATCH_BYTES))]  # one: as is


def test_only_a_publisher_handing_us_its_own_message_pays() -> None:
    assert publisher_pays(A, A)
    assert not publisher_pays(A, B)  # relayed: the publisher field is not authenticated
    assert not publisher_pays(A, None)  # no forwarder known: nobody to charge for sure


def test_pace_spends_its_share_then_waits_for_the_rate() -> None:
    pace = GossipPace(GossipLimits(peer_rate=100, peer_burst=50), T0)  # 80/s, burst 40
    assert pace.delay(40, T0) == 0.0
    assert pace.delay(8, T0) == pytest.approx(0.1)  # nothing spent while it waits
    assert pace.delay(8, T0 + 0.1) == 0.0
    # A cost beyond the burst waits for a full bucket, then goes.
    assert pace.delay(1000, T0 + 0.1) == pytest.approx(0.5)
    assert pace.delay(1000, T0 + 0.6) == 0.0


@given(st.lists(st.tuples(st.integers(1, MAX_BATCH_ITEMS), st.floats(0, 0.5), st.floats(0, 1.0)),
                min_size=1, max_size=300))
def test_a_paced_publisher_never_pays_at_a_receiver_with_the_same_limits(
        sends: list[tuple[int, float, float]]) -> None:
    """Whatever a local burst looks like (batches of 1-64 events, any gaps) and however the
    network bunches the arrivals (each up to a second late, in any order that keeps each
    batch whole), a receiver with the sender's limits takes every event: a publisher is never
    banned for its own publishes."""
    limits = GossipLimits(peer_rate=1000, peer_burst=5000)
    pace, gate, now = GossipPace(limits, T0), GossipGate(SenderPolicy(ME), limits), T0
    arrivals: list[tuple[float, list[bytes]]] = []
    for n, gap, late in sends:
        now += gap
        now += pace.delay(n, now)  # the outbox sleeps this long, then asks again
        assert pace.delay(n, now) == 0.0
        arrivals.append((now + late, [event(1, b"e")] * n))
    for at, batch in sorted(arrivals, key=lambda a: a[0]):
        admitted = gate.admit(pack_batch(batch), A, at, publisher=A)
        assert not admitted.rejected
