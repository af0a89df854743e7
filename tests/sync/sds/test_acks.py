"""Acknowledgements that cannot be forged (attack 5): only what a sender signed counts, and
"acknowledged" from bloom filters needs several signers."""

from __future__ import annotations

import gc
import tracemalloc

from sync.sds import (
    Acknowledged,
    Delivered,
    PossiblyAcknowledged,
    RollingBloomFilter,
    SdsChannel,
    SdsConfig,
    decode_transmission,
    sds_pb2,
    transmission_suffix,
)
from sync.sds.acks import MASKED_ENTRIES
from sync.sds.bloom import BloomView, bloom_indices
from sync.sds.message import filter_signed_bytes
from sync.sds.state import encode_state
from tests.sync.sds.helpers import CHANNEL, T0, channel, key, of_type

CONFIG = SdsConfig(bloom_capacity=100)
PARAMS = channel(0, config=CONFIG).setup.profile.bloom_params


def sparse_filter(ids: list[str]) -> bytes:
    """A filter holding exactly ``ids``: nearly empty, so its false-positive rate is tiny."""
    bloom = RollingBloomFilter(PARAMS, 100)
    for mid in ids:
        bloom.add(mid)
    return bloom.to_bytes()


def setup(members: int = 3) -> tuple[SdsChannel, str, list[bytes]]:
    """We sent one message and heard one (history-free) message from each other member;
    returns us, our message id and their canonical events."""
    us = channel(0, config=CONFIG)
    heard = []
    for i in range(1, members + 1):
        wire = channel(i, config=CONFIG).send(b"hello", T0)
        us.receive(wire, T0)
        heard.append(decode_transmission(wire).event.wire)
    mid = decode_transmission(us.send(b"ours", T0)).event.message_id
    us.events()
    return us, mid, heard


def with_filter(event_wire: bytes, ids: list[str], signer: int | None) -> bytes:
    signing_key = key(signer) if signer is not None else None
    return event_wire + transmission_suffix(sparse_filter(ids), PARAMS, (),
                                            channel_id=CHANNEL, signing_key=signing_key)


def test_a_relay_cannot_attach_its_own_filter_to_another_senders_event() -> None:
    us, mid, heard = setup()
    # Unsigned filter on member 1's valid event ...
    us.receive(with_filter(heard[0], [mid], None), T0 + 1)
    # ... or one signed by the relay (member 3) in member 1's name; and again on member 2's.
    us.receive(with_filter(heard[0], [mid], 3), T0 + 1)
    us.receive(with_filter(heard[1], [mid], 3), T0 + 1)
    events = us.events()
    assert not of_type(events, Acknowledged)
    assert mid in us.layers.outgoing.ids
    assert us.layers.outgoing.entries[mid].bloom_senders == set()  # counted as nobody's evidence
    # At most a hint: possibly acknowledged (resent less often), never acknowledged.
    assert [e.message_id for e in of_type(events, PossiblyAcknowledged)] == [mid]


def test_one_signed_filter_is_not_enough_two_are() -> None:
    us, mid, heard = setup()
    us.receive(with_filter(heard[0], [mid], 1), T0 + 1)
    assert not of_type(us.events(), Acknowledged)
    assert mid in us.layers.outgoing.ids and us.layers.outgoing.entries[mid].bloom_senders == {
        channel(1).setup.participant_id}
    # The same member repeating itself adds nothing.
    us.receive(with_filter(heard[0], [mid], 1), T0 + 2)
    assert mid in us.layers.outgoing.ids
    us.receive(with_filter(heard[1], [mid], 2), T0 + 2)
    acked = of_type(us.events(), Acknowledged)
    assert [(a.message_id, a.by_bloom) for a in acked] == [(mid, True)]
    assert mid not in us.layers.outgoing.ids


def test_in_a_pair_the_one_peer_filter_acknowledges() -> None:
    us, mid, heard = setup(members=1)
    us.receive(with_filter(heard[0], [mid], 1), T0 + 1)
    assert [a.message_id for a in of_type(us.events(), Acknowledged)] == [mid]


def test_filter_signature_travels_outside_the_canonical_wire() -> None:
    us = channel(0, config=CONFIG)
    tx = decode_transmission(us.send(b"x", T0))
    assert tx.bloom_signature is not None and len(tx.bloom_signature) == 64
    assert not sds_pb2.Message.FromString(tx.event.wire).HasField("bloom_signature")
    # Spec field numbers are untouched: the filter is still field 12, ours are new ones.
    fields = sds_pb2.Message.DESCRIPTOR.fields_by_name
    assert fields["bloom_filter"].number == 12
    assert fields["bloom_signature"].number == 33
    # A signature over another channel's filter does not verify here.
    other = filter_signed_bytes("other", PARAMS, sparse_filter([]))
    assert filter_signed_bytes(CHANNEL, PARAMS, sparse_filter([])) != other


def test_a_resend_of_an_id_gone_from_the_rolling_filter_is_acknowledged_again() -> None:
    """Issue 31: at 1,000 events/s the rolling filter covers about a second, so an id could
    leave it before the receiver's next message; its resends were dropped as duplicates without
    going back into the filter, and the sender resent it until ``max_resends``."""
    config = SdsConfig(bloom_capacity=50)
    sender, receiver, other = (channel(i, config=config) for i in range(3))
    wire = sender.send(b"mine", T0)
    mid = decode_transmission(wire).event.message_id
    receiver.receive(wire, T0)
    for n in range(60):  # the window moves on past it
        receiver.receive(other.send(b"%d" % n, T0), T0)
    assert mid not in receiver._ack_filter.full
    receiver.receive(wire, T0 + 10)  # the resend: a duplicate
    assert receiver.layers.stats.duplicates_received == 1
    assert mid in receiver._ack_filter.full
    sent = decode_transmission(receiver.send(b"next", T0 + 10))
    assert sent.bloom_filter is not None and sent.bloom_params is not None
    view = BloomView(sent.bloom_filter, sent.bloom_params, max_bits=1 << 20)
    assert view.contains_indices(bloom_indices(mid, sent.bloom_params))


def test_naming_our_newest_message_acknowledges_its_causal_past() -> None:
    """Issue 31: a history names only what its sender delivered, and so its causal past; of a
    batch chained by histories only the newest is a head, and the rest were resent although
    they had arrived everywhere (bloom filters cover about a second at 1,000 events/s)."""
    us, peer, other = channel(0), channel(1), channel(2)
    hello = other.send(b"hello", T0)
    us.receive(hello, T0)  # two others heard: one filter is not enough
    peer.receive(hello, T0)
    ours = [us.send(b"%d" % i, T0 + 1) for i in range(5)]
    ids = [decode_transmission(w).event.message_id for w in ours]
    us.events()
    for wire in ours:
        peer.receive(wire, T0 + 1)
    reply = decode_transmission(peer.send(b"reply", T0 + 2))
    named = set(reply.event.history_ids)
    assert ids[-1] in named and not named & set(ids[:3])
    us.receive(reply.event.wire, T0 + 2)  # its event alone: no filter at all
    acked = {e.message_id: e.by_bloom for e in of_type(us.events(), Acknowledged)}
    assert acked == dict.fromkeys(ids, False)
    assert not us.layers.outgoing.ids & set(ids)


def test_resends_back_off_while_acknowledgements_are_slow() -> None:
    """Issue 31: acknowledgements slower than the resend interval (an overloaded cluster)
    turned every event into 3-4 resends; the first resend now waits for the smoothed delay
    plus four deviations (TCP's RTO), between 1 and 3 intervals."""
    us, peer = channel(0), channel(1)
    interval = us.setup.config.resend_interval
    first = us.send(b"first", T0)
    peer.receive(first, T0)
    late = T0 + 2 * interval  # acknowledged by a history after two intervals, never resent
    reply = decode_transmission(peer.send(b"reply", late))
    us.receive(reply.event.wire, late)
    assert of_type(us.events(), Acknowledged)
    us.send(b"second", late)
    us.handle_timer(late + interval + 1)
    assert us.layers.stats.resends == 0  # before: resent here
    us.handle_timer(late + 3 * interval + 1)
    assert us.layers.stats.resends == 1
    # With no acknowledgement delay measured yet, the first resend comes after one interval.
    quick = channel(0)
    quick.send(b"x", T0)
    quick.handle_timer(T0 + interval + 1)
    assert quick.layers.stats.resends == 1


def test_a_past_the_namer_may_have_declared_lost_is_not_acknowledged_with_it() -> None:
    """A message delivered with a *lost* dependency is named although its namer never held
    that dependency. With ``lost_timeout`` shorter than our resends last (5 s here, resends
    every 10 s), a walk that ignored this would acknowledge our first message, which the peer
    never received and had declared lost: an acknowledgement for an event nobody else holds.
    Only an entry first sent within ``lost_timeout`` is acknowledged by a later one's."""
    cfg = SdsConfig(lost_timeout=5.0, resend_interval=10.0)
    us, peer, other = channel(0, config=cfg), channel(1, config=cfg), channel(2, config=cfg)
    hello = other.send(b"hello", T0)
    us.receive(hello, T0)
    peer.receive(hello, T0)
    lost = decode_transmission(us.send(b"lost on the way", T0 + 1)).event.message_id
    second = us.send(b"second", T0 + 2)
    mid = decode_transmission(second).event.message_id
    us.events()
    assert lost in decode_transmission(second).event.history_ids
    peer.receive(second, T0 + 2)  # its dependency never arrives: declared lost at T0 + 7
    peer.handle_timer(T0 + 8)
    assert not peer.layers.incoming.holds(lost) and peer.layers.incoming.holds(mid)
    reply = decode_transmission(peer.send(b"reply", T0 + 8))
    assert mid in reply.event.history_ids
    us.receive(reply.event.wire, T0 + 8)
    acked = {e.message_id for e in of_type(us.events(), Acknowledged)}
    assert acked == {mid}
    assert lost in us.layers.outgoing.ids  # still resent: the peer asks for it (SDS-R) or Recon


def test_the_causal_past_of_a_restored_entry_waits_for_its_own_acknowledgement() -> None:
    """After a restart our entries' first sends are unknown: none is acknowledged by the walk
    (a member may have declared it lost meanwhile), each still is by a history naming it."""
    us, peer, other = channel(0), channel(1), channel(2)
    hello = other.send(b"hello", T0)
    us.receive(hello, T0)
    peer.receive(hello, T0)
    ours = [us.send(b"%d" % i, T0 + 1) for i in range(5)]
    ids = [decode_transmission(w).event.message_id for w in ours]
    delivered = of_type(us.events(), Delivered)
    again = SdsChannel.restore(encode_state(us.snapshot()), key(0), now=T0 + 2,
                               log=[(d.message_id, d.lamport, d.sender_id) for d in delivered],
                               cached_wires=[d.wire for d in delivered])
    assert set(ids) <= again.layers.outgoing.ids
    again.events()
    for wire in ours:
        peer.receive(wire, T0 + 2)
    reply = decode_transmission(peer.send(b"reply", T0 + 3))
    named = set(reply.event.history_ids) & set(ids)
    assert ids[-1] in named and ids[0] not in named
    again.receive(reply.event.wire, T0 + 3)
    acked = {e.message_id for e in of_type(again.events(), Acknowledged)}
    assert acked == named
    assert set(ids) - named == again.layers.outgoing.ids


def _resent(ch: SdsChannel, mid: str, now: float) -> bool:
    return any(decode_transmission(d).event.message_id == mid for d in ch.handle_timer(now))


def test_a_possibly_acknowledged_message_waits_from_its_last_send_when_the_timeout_grew() -> None:
    """The back-off and possible acknowledgement together: rescheduling a message turning
    possibly acknowledged to its due time minus the *current* timeout plus 30 s would, when
    acknowledgements had slowed since it was sent (timeout 10 s -> 30 s), give its send + 10 s,
    as if it were not possibly acknowledged at all. It waits 30 s from its last send."""
    us, late = channel(0, config=CONFIG), channel(4, config=CONFIG)
    heard = []
    for i in (1, 2, 3):
        wire = channel(i, config=CONFIG).send(b"hello", T0)
        us.receive(wire, T0)
        late.receive(wire, T0)  # what "first" depends on
        heard.append(decode_transmission(wire).event.wire)
    first = us.send(b"first", T0)
    late.receive(first, T0 + 1)
    ours = decode_transmission(us.send(b"ours too", T0 + 20)).event.message_id  # due T0 + 30
    reply = decode_transmission(late.send(b"reply", T0 + 25)).event.wire
    us.receive(reply, T0 + 25)  # "first" acknowledged after 25 s: the timeout grows to 30 s
    assert us.layers.outgoing.timeout() == 30.0
    us.receive(with_filter(heard[1], [ours], 2), T0 + 26)
    events = us.events()
    assert [e.message_id for e in of_type(events, PossiblyAcknowledged)] == [ours]
    assert not _resent(us, ours, T0 + 31)
    assert _resent(us, ours, T0 + 51)


def test_a_burst_of_unacknowledged_entries_holds_few_filter_wide_integers() -> None:
    """Each of our messages waiting for its acknowledgement is tested against every received
    filter, and its test cached an integer as wide as the filter (~860 bytes at the default
    geometry, more than a small event's wire, uncounted by ``max_outgoing_bytes``): after a
    burst of thousands, ~1.3 KB more per entry for as long as it waited. Now at most
    ``MASKED_ENTRIES`` entries hold one; the others keep their bit positions only."""
    us, other = channel(0), channel(1)  # the default geometry: 1,000 ids at 1 %
    params = us.setup.profile.bloom_params
    heard = decode_transmission(other.send(b"hello", T0)).event.wire
    us.receive(heard, T0)
    for n in range(3000):
        us.send(b"%d" % n, T0)
    us.events()
    assert len(us.layers.outgoing.entries) == 3000
    bloom = RollingBloomFilter(params, 1000)
    for n in range(100):  # a filter of other ids: every entry is tested, none acknowledged
        bloom.add(f"elsewhere {n}")
    wire = heard + transmission_suffix(bloom.to_bytes(), params, (), channel_id=CHANNEL,
                                       signing_key=key(1))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        us.receive(wire, T0 + 1)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    entries = us.layers.outgoing.entries.values()
    assert len(entries) == 3000 and all(params in e.indices for e in entries)
    assert sum(bool(e.masks) for e in entries) <= MASKED_ENTRIES
    assert held / 3000 < 800, f"{held / 3000:.0f} bytes held per entry after one review"


def test_a_small_buffer_keeps_the_one_and_test() -> None:
    """A busy node's few hundred outstanding messages keep their integer masks (the cheaper
    test on a hit, in the review every received filter runs)."""
    us, mid, heard = setup()
    us.receive(with_filter(heard[0], [mid], 1), T0 + 1)
    assert us.layers.outgoing.entries[mid].masks
