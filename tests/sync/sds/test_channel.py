"""One unit test per SDS protocol step (send, receive, deliver, conflicts, acks, buffers, sync,
ephemeral), on signed channels with a fake clock."""

from __future__ import annotations

import pytest

from sync.errors import LocalProtocolError, RemoteProtocolError
from sync.identity import peer_id_of
from sync.sds import (
    Acknowledged,
    Delivered,
    DependencyLost,
    EphemeralReceived,
    MissingDependencies,
    PossiblyAcknowledged,
    ResendExhausted,
    SdsChannel,
    SdsConfig,
    decode_transmission,
    sds_pb2,
)
from sync.sds.bloom import BloomView, bloom_indices
from tests.sync.sds.helpers import CHANNEL, T0, channel, key, of_type

MS = int(T0 * 1000)


def delivered_ids(ch: SdsChannel) -> list[str]:
    return [e.message_id for e in of_type(ch.events(), Delivered)]


def test_constructor_checks_identity_and_initialises_lamport_to_epoch_ms() -> None:
    with pytest.raises(LocalProtocolError):
        SdsChannel(CHANNEL, "not-my-id", key(0))
    assert channel(0).layers.incoming.lamport == MS


def test_send_sets_lamport_max_of_now_and_previous_plus_one() -> None:
    ch = channel(0)
    first = decode_transmission(ch.send(b"a", T0)).event
    second = decode_transmission(ch.send(b"b", T0)).event
    third = decode_transmission(ch.send(b"c", T0 + 5)).event
    assert (first.lamport, second.lamport, third.lamport) == (MS + 1, MS + 2, MS + 5000)
    with pytest.raises(LocalProtocolError):
        ch.send(b"", T0)


def test_send_delivers_locally_and_includes_history_hints_and_bloom() -> None:
    ch = channel(0, config=SdsConfig(bloom_small_max=0))  # the full filter, on every message
    a = ch.send(b"a", T0, retrieval_hint=b"hint-a")
    b = ch.send(b"b", T0)
    c = decode_transmission(ch.send(b"c", T0))
    ids = delivered_ids(ch)
    assert len(ids) == 3
    assert c.event.history_ids == tuple(ids[:2])  # the two preceding ids, in log order
    assert c.event.causal_history[0].retrieval_hint == b"hint-a"
    assert {h.sender_id for h in c.event.causal_history} == {ch.setup.participant_id}
    assert c.bloom_params == ch.setup.profile.bloom_params and c.bloom_filter is not None
    view = BloomView(c.bloom_filter, ch.setup.profile.bloom_params, max_bits=1 << 20)
    assert all(view.contains_indices(bloom_indices(i, ch.setup.profile.bloom_params)) for i in ids)
    assert ch.layers.outgoing.ids == set(ids)
    assert decode_transmission(a).event.causal_history == ()
    assert len(decode_transmission(b).event.causal_history) == 1


def test_receive_delivers_raises_lamport_and_ignores_own_and_duplicates() -> None:
    a, b = channel(0), channel(1, now=T0 - 100)
    data = a.send(b"hello", T0)
    a.events()
    b.receive(data, T0 - 99)
    [ev] = b.events()
    assert isinstance(ev, Delivered) and ev.content == b"hello" and ev.lamport == MS + 1
    assert b.layers.incoming.lamport == MS + 1
    assert not ev.lost_dependency and ev.wire == decode_transmission(data).event.wire
    assert b.layers.stats.duplicates_received == 0
    b.receive(data, T0)
    assert b.events() == [] and b.layers.stats.duplicates_received == 1
    a.receive(data, T0)  # our own message echoed back: not received from anyone
    assert (a.events() == [] and len(a.layers.log.entries()) == 1
            and a.layers.stats.duplicates_received == 0)


def test_conflicting_lamport_ordered_by_message_id() -> None:
    a, b, c = channel(0), channel(1), channel(2)
    ma, mb = a.send(b"x", T0), b.send(b"y", T0)
    c.receive(mb, T0)
    c.receive(ma, T0)
    log = c.layers.log.entries()
    assert log[0][0] == log[1][0] == MS + 1
    assert [mid for _, mid in log] == sorted(mid for _, mid in log)


def test_history_acknowledges_and_bloom_possibly_acknowledges_then_promotes() -> None:
    cfg = SdsConfig(causal_history_size=0, sync_history_size=0, ack_fp_bound=1e-30,
                    bloom_small_max=0)  # the full filter: sparse, its rate from its fill
    a, b, c = (channel(i, config=cfg) for i in range(3))
    m = a.send(b"m", T0)
    mid = delivered_ids(a)[0]
    for other in (b, c):
        other.receive(m, T0)
    b_msg = b.send(b"from b", T0)
    a.receive(b_msg, T0)
    tx_b = decode_transmission(b_msg)
    assert tx_b.bloom_params is not None
    fp_b = BloomView(tx_b.bloom_filter or b"", tx_b.bloom_params, max_bits=1 << 20
                     ).false_positive_rate
    assert fp_b > 1e-30
    assert of_type(a.events(), PossiblyAcknowledged) == [PossiblyAcknowledged(mid, 1)]
    a.receive(b.send(b"again", T0), T0)  # the same participant is no new evidence
    assert of_type(a.events(), PossiblyAcknowledged) == []
    a.receive(c.send(b"from c", T0), T0)
    assert Acknowledged(mid, by_bloom=True) in a.events()
    assert a.layers.outgoing.ids == frozenset()
    # With history, the reply names the message: a certain acknowledgement.
    x, y = channel(0), channel(1)
    mx = x.send(b"m", T0)
    [x_id] = delivered_ids(x)
    y.receive(mx, T0)
    x.receive(y.send(b"reply", T0), T0)
    assert Acknowledged(x_id, by_bloom=False) in x.events()


def _four_messages() -> tuple[SdsChannel, list[bytes], list[str]]:
    a = channel(0)
    wires = [a.send(f"a{i}".encode(), T0 + i) for i in range(4)]
    return a, wires, delivered_ids(a)


def test_causal_order_under_loss_repaired_by_resend() -> None:
    cfg = SdsConfig(resend_interval=10)
    a = channel(0, config=cfg)
    wires = [a.send(f"a{i}".encode(), T0 + i) for i in range(4)]
    ids = delivered_ids(a)
    b = channel(1)
    for i in (0, 2, 3):  # a1 dropped
        b.receive(wires[i], T0 + i)
    events = b.events()
    assert [e.message_id for e in of_type(events, Delivered)] == [ids[0]]
    missing = [e.message_id for m in of_type(events, MissingDependencies) for e in m.entries]
    assert missing == [ids[1]]
    assert b.layers.incoming.waiting_ids == {ids[2], ids[3]}
    # a's resend timer fires; b delivers a1 then the cascade a2, a3 in order.
    resent = a.handle_timer(T0 + 13)
    assert len(resent) == 4
    for data in resent:
        b.receive(data, T0 + 14)
    assert delivered_ids(b) == ids[1:]
    assert b.layers.incoming.waiting_ids == frozenset()
    assert b.layers.incoming.missing_ids == frozenset()


def test_waiting_message_is_not_a_met_dependency() -> None:
    _, wires, ids = _four_messages()
    b, c = channel(1), channel(2)
    for data in wires:
        b.receive(data, T0)
    reply = b.send(b"b", T0)  # names a2, a3
    c.receive(wires[0], T0)
    c.receive(wires[3], T0)  # waits for a1, a2
    c.receive(wires[3], T0)  # again, while it waits
    assert c.layers.stats.duplicates_received == 1
    c.receive(reply, T0)  # waits for a2 (missing) and a3 (waiting, not delivered)
    assert delivered_ids(c) == [ids[0]]
    assert len(c.layers.incoming.waiting_ids) == 2
    c.receive(wires[1], T0)
    c.receive(wires[2], T0)
    assert delivered_ids(c)[-1] == decode_transmission(reply).event.message_id


@pytest.mark.parametrize("policy", ["deliver", "drop"])
def test_lost_dependency_policy(policy: str) -> None:
    cfg = SdsConfig(lost_timeout=60, lost_policy=policy)  # type: ignore[arg-type]
    _, wires, ids = _four_messages()
    b = channel(1, config=cfg)
    for i in (0, 2, 3):
        b.receive(wires[i], T0)
    b.events()
    timer = b.get_timer()
    assert timer is not None
    b.handle_timer(T0 + 59)
    assert not of_type(b.events(), DependencyLost)
    b.handle_timer(T0 + 60)
    events = b.events()
    lost = of_type(events, DependencyLost)
    assert lost[0].message_id == ids[1] and set(lost[0].dependants) == {ids[2], ids[3]}
    delivered = of_type(events, Delivered)
    if policy == "deliver":
        assert [d.message_id for d in delivered] == ids[2:]
        assert all(d.lost_dependency for d in delivered)
    else:
        assert delivered == [] and b.layers.incoming.waiting_ids == frozenset()
    assert b.layers.incoming.missing_ids == frozenset()


def test_resend_periods_and_give_up() -> None:
    cfg = SdsConfig(
        resend_interval=10, possibly_acked_resend_interval=25, max_resends=2, ack_fp_bound=1e-300
    )
    a, b = channel(0, config=cfg), channel(1, config=cfg)
    first = a.send(b"1", T0)
    second = a.send(b"2", T0)
    ids = delivered_ids(a)
    assert a.handle_timer(T0 + 9.9) == []
    resent = [decode_transmission(d).event.message_id for d in a.handle_timer(T0 + 10)]
    assert sorted(resent) == sorted(ids)
    # b has only the first: its filter makes the first possibly acknowledged, resent later.
    b.receive(first, T0 + 11)
    sync = b.send(b"b", T0 + 11)
    msg = sds_pb2.Message()
    msg.ParseFromString(sync)
    a_view = decode_transmission(sync)
    assert a_view.event.history_ids == (ids[0],)  # names it: acknowledged for sure
    a.receive(second, T0)  # no-op, own echo
    assert {decode_transmission(d).event.message_id for d in a.handle_timer(T0 + 20)} == set(ids)
    a.handle_timer(T0 + 30)
    events = a.events()
    assert {e.message_id for e in of_type(events, ResendExhausted)} == set(ids)
    assert all(e.attempts == 2 for e in of_type(events, ResendExhausted))
    assert a.layers.outgoing.ids == frozenset()


def test_possibly_acknowledged_uses_the_longer_resend_period() -> None:
    cfg = SdsConfig(
        causal_history_size=0,
        sync_history_size=0,
        resend_interval=10,
        possibly_acked_resend_interval=25,
        ack_fp_bound=1e-300,
    )
    a, b = channel(0, config=cfg), channel(1, config=cfg)
    m = a.send(b"1", T0)
    b.receive(m, T0)
    a.receive(b.send(b"x", T0 + 1), T0 + 1)
    assert of_type(a.events(), PossiblyAcknowledged)
    assert a.handle_timer(T0 + 24.9) == []
    assert len(a.handle_timer(T0 + 25)) == 1


def test_sync_message_rules() -> None:
    cfg = SdsConfig(sync_interval=30, sync_jitter=30)
    a, b = channel(0, config=cfg), channel(1, config=cfg)
    # An empty channel has nothing to say: the timer fires, nothing is sent.
    first = a.get_timer()
    assert first is not None and T0 + 30 <= first <= T0 + 60
    assert a.handle_timer(first) == []
    m = b.send(b"m", first)
    a.receive(m, first)
    a.events()
    mid = decode_transmission(m).event.message_id
    # Activity pushes the sync back; it fires after a quiet back-off.
    due = a.get_timer()
    assert due is not None and due >= first + 30
    lamport_before = a.layers.incoming.lamport
    sent = a.handle_timer(due)
    due2 = a.get_timer()
    assert due2 is not None
    if not sent:
        sent = a.handle_timer(due2)
    [sync] = sent
    tx = decode_transmission(sync)
    assert tx.event.content == b"" and tx.event.is_sync
    assert tx.event.lamport is not None and tx.event.lamport > lamport_before
    assert tx.event.history_ids == (mid,) and tx.bloom_filter is not None
    assert a.layers.outgoing.ids == frozenset() and len(a.layers.log.entries()) == 1
    # The receiver processes history (acknowledging m) but stores nothing.
    b.events()
    b.receive(sync, due2)
    assert b.events() == [Acknowledged(mid)]
    entries = b.layers.log.entries()
    assert len(entries) == 1 and tx.event.message_id not in {m for _, m in entries}


def test_sync_back_off_is_random_per_rng() -> None:
    cfg = SdsConfig(sync_interval=30, sync_jitter=30)
    timers = {channel(i, config=cfg).get_timer() for i in range(5)}
    assert len(timers) == 5


def test_ephemeral_messages() -> None:
    a, b = channel(0), channel(1)
    a.send(b"persistent", T0)
    data = a.send(b"typing...", T0, ephemeral=True)
    msg = sds_pb2.Message()
    msg.ParseFromString(data)
    assert not msg.HasField("lamport_timestamp") and not msg.causal_history
    assert not msg.HasField("bloom_filter")
    assert len(a.layers.outgoing.ids) == 1
    b.receive(data, T0)
    b.receive(data, T0)
    [ev] = b.events()
    assert isinstance(ev, EphemeralReceived) and ev.content == b"typing..."
    assert b.layers.log.entries() == [] and b.layers.incoming.waiting_ids == frozenset()
    with pytest.raises(LocalProtocolError):  # not logged: nothing could name it with a hint
        a.send(b"typing...", T0, retrieval_hint=b"key", ephemeral=True)
    with pytest.raises(LocalProtocolError):
        a.send(b"", T0, ephemeral=True)


def test_invalid_message_is_never_delivered_buffered_or_acknowledged() -> None:
    a, b = channel(0), channel(1)
    m = a.send(b"m", T0)
    b.receive(m, T0)
    reply = decode_transmission(b.send(b"reply names m", T0))
    forged = sds_pb2.Message()
    forged.ParseFromString(reply.event.wire)
    forged.signature = bytes(64)
    a.events()
    with pytest.raises(RemoteProtocolError) as err:
        a.receive(forged.SerializeToString(), T0, peer="bad-peer")
    assert err.value.peer == "bad-peer"
    assert a.events() == [] and len(a.layers.outgoing.ids) == 1 and len(a.layers.log.entries()) == 1
    other = SdsChannel("other-channel", peer_id_of(key(2)), key(2))
    with pytest.raises(RemoteProtocolError, match="another channel"):
        a.receive(other.send(b"x", T0), T0)
    assert a.events() == [] and len(a.layers.log.entries()) == 1


def test_duplicates_do_not_suppress_the_sync_that_acknowledges_them() -> None:
    """Regression: a resend every few seconds must not hold back the receiver's sync (which
    carries the acknowledgement the resender waits for)."""
    cfg = SdsConfig(resend_interval=2, sync_interval=3, sync_jitter=3)
    a, b = channel(0, config=cfg), channel(1, config=cfg)
    m = a.send(b"m", T0)
    b.receive(m, T0)
    now, synced = T0, False
    while now < T0 + 20 and not synced:
        now += 1
        for data in a.handle_timer(now):
            b.receive(data, now)
        for data in b.handle_timer(now):
            synced = True
            a.receive(data, now)
    assert synced and a.layers.outgoing.ids == frozenset()


def test_activity_from_others_postpones_our_sync() -> None:
    cfg = SdsConfig(sync_interval=30, sync_jitter=0)
    a, b = channel(0, config=cfg), channel(1, config=cfg)
    b.receive(a.send(b"m", T0), T0)
    assert b.get_timer() == T0 + 30
    b.receive(a.send(b"n", T0 + 20), T0 + 20)  # new content: the sync backs off
    assert b.handle_timer(T0 + 30) == []
    assert b.get_timer() == T0 + 50
    assert len(b.handle_timer(T0 + 50)) == 1


def test_trusted_signature_skips_verification_but_not_the_id_check() -> None:
    alice, bob = channel(0), channel(1)
    wire = alice.send(b"hello", T0 + 1)
    event = decode_transmission(wire).event
    # Trusted with a forged signature: receive accepts it without checking the signature ...
    forged_sig = bytes(64)
    msg = sds_pb2.Message.FromString(wire)
    msg.signature = forged_sig
    bob.layers.signatures.trust(event._replace(signature=forged_sig))
    bob.receive(msg.SerializeToString(), T0 + 2)
    assert delivered_ids(bob) == [event.message_id]
    # ... but other content under the same id and signature is still refused.
    carol = channel(2)
    carol.layers.signatures.trust(event)
    msg = sds_pb2.Message.FromString(wire)
    msg.content = b"tampered"
    with pytest.raises(RemoteProtocolError, match="message id"):
        carol.receive(msg.SerializeToString(), T0 + 2)


def test_receive_event_takes_a_decoded_event_and_checks_its_channel() -> None:
    alice, bob = channel(0), channel(1)
    first = decode_transmission(alice.send(b"one", T0 + 1)).event
    second = decode_transmission(alice.send(b"two", T0 + 2)).event
    bob.receive_event(second, T0 + 3, peer="p")
    assert delivered_ids(bob) == []  # waits for its dependency, as with receive
    assert bob.layers.stats.fetched_waiting == 1
    bob.receive_event(first, T0 + 3, peer="p")
    assert delivered_ids(bob) == [first.message_id, second.message_id]
    assert bob.layers.stats.fetched_waiting == 1  # delivered at once: it did not wait
    with pytest.raises(RemoteProtocolError, match="another channel") as info:
        bob.receive_event(first._replace(channel_id="elsewhere"), T0 + 4, peer="p")
    assert info.value.peer == "p"


def test_only_fetched_events_left_waiting_count_as_fetched_waiting() -> None:
    alice, bob = channel(0), channel(1)
    wires = [alice.send(f"m{i}".encode(), T0 + 1 + i) for i in range(3)]
    events = [decode_transmission(w).event for w in wires]
    bob.receive(wires[2], T0 + 5)  # a gossip copy ahead of its dependencies: not counted
    assert delivered_ids(bob) == [] and bob.layers.stats.fetched_waiting == 0
    bob.receive_event(events[2], T0 + 5, peer="p")  # its fetched copy finds it waiting
    assert bob.layers.stats.fetched_waiting == 1
    for event in events[:2]:  # in causal order: delivered at once, with the waiting one
        bob.receive_event(event, T0 + 6, peer="p")
    assert delivered_ids(bob) == [e.message_id for e in events]
    assert bob.layers.stats.fetched_waiting == 1


def test_is_missing_follows_the_missing_set() -> None:
    alice, bob = channel(0), channel(1)
    first = alice.send(b"one", T0 + 1)
    second = alice.send(b"two", T0 + 2)
    first_id = decode_transmission(first).event.message_id
    bob.receive(second, T0 + 3)
    assert bob.layers.incoming.is_missing(first_id) and first_id in bob.layers.incoming.missing_ids
    bob.receive(first, T0 + 4)
    incoming = bob.layers.incoming
    assert not incoming.is_missing(first_id) and first_id not in incoming.missing_ids


def test_an_own_echo_is_stored_only_when_the_channel_no_longer_holds_it() -> None:
    a = channel(0)
    event = decode_transmission(a.send(b"mine", T0)).event
    a.events()
    assert not a.layers.log.takes_back(event)  # held: SDS ignores the echo
    wiped = channel(0)  # same identity, empty log (a wiped database)
    assert wiped.layers.log.takes_back(event)


def test_filter_of_unnamed_ids_is_small_and_still_acknowledges() -> None:
    """Issue 31 (``bloom_small_max``): the filter holds only ids no other member's history
    named yet, sized for their number; a pair still acknowledges by it, and an id named by
    someone else's history leaves it."""
    cfg = SdsConfig(bloom_small_max=256, causal_history_size=0, sync_history_size=0)
    a, b, c = (channel(i, config=cfg) for i in range(3))
    x = a.send(b"x", T0)
    [x_id] = delivered_ids(a)
    b.receive(x, T0)
    tx = decode_transmission(b.send(b"y", T0))
    assert tx.bloom_filter is not None and tx.bloom_params is not None
    assert len(tx.bloom_filter) < 64 < b.setup.profile.bloom_params.nbytes
    view = BloomView(tx.bloom_filter, tx.bloom_params, max_bits=1 << 20)
    assert view.contains_indices(bloom_indices(x_id, tx.bloom_params))
    a.receive(b.send(b"z", T0), T0)
    assert Acknowledged(x_id, by_bloom=True) in a.events()
    # c names x in a history: b drops it from its filter.
    named = channel(2, config=SdsConfig(bloom_small_max=256))
    named.receive(x, T0)
    b.receive(named.send(b"names x", T0), T0)
    assert x_id not in b._ack_filter._unnamed
    del c


def _sync_delays(scaled: bool, members: int) -> list[float]:
    cfg = SdsConfig(resend_interval=10_000, sync_interval=30, sync_jitter=30,
                    sync_jitter_scaled=scaled)
    delays = []
    for i in range(40):
        ch = channel(i, config=cfg)
        ch.layers.repair.members.set_external(members)
        ch.send(b"x", T0)
        first = ch.get_timer()
        assert first is not None
        assert ch.handle_timer(first)  # the periodic sync
        nxt = ch.get_timer()
        assert nxt is not None
        delays.append(nxt - first)
    return delays


def test_sync_jitter_grows_with_the_response_groups() -> None:
    """With G = N div 128 + 1 groups the jitter is G times ``sync_jitter``: the first sync
    suppresses the rest, so spreading N members' timers G times wider keeps the group's sync
    rate near a small group's (docs/sds.md "Sync messages")."""
    small = _sync_delays(True, 10)
    assert all(30 <= d <= 60 for d in small)
    big = _sync_delays(True, 300)  # G = 3
    assert all(30 <= d <= 120 for d in big) and max(big) > 70
    assert all(30 <= d <= 60 for d in _sync_delays(False, 300))
