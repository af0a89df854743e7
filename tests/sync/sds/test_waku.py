"""The "waku" SDS profile against wire bytes of the real @waku/sds 0.0.8.

The fixtures were written by ``scripts/interop/waku_fixtures.py``, which ran the npm package next
to our channel and checked on the package's side that it decodes, delivers, acknowledges and
repairs the messages of ours recorded here. These tests replay our side from the recorded steps
(our encoder must reproduce every recorded wire byte for byte, so the package's verdicts hold for
today's code) and check what our channel makes of the package's messages.
"""

from __future__ import annotations

import base64
import json
import random
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sync.errors import RemoteProtocolError
from sync.sds import (
    Acknowledged,
    Delivered,
    EphemeralReceived,
    MissingDependencies,
    RepairAnswered,
    RepairRequested,
    SdsChannel,
    SdsConfig,
    SdsEvent,
    decode_transmission,
    sds_pb2,
)
from sync.sds.bloom import BloomView, RollingBloomFilter
from sync.sds.profile import decode_event_in
from sync.sds.waku import (
    WAKU_BLOOM,
    WAKU_BLOOM_BITS,
    WAKU_BLOOM_BYTES,
    WAKU_BLOOM_HASHES,
    waku_bloom_indices,
    waku_hash_n,
    waku_message_id,
)

FIXTURES = Path(__file__).parent / "fixtures" / "waku"
SCENARIO = json.loads((FIXTURES / "scenario.json").read_text())
BLOOM = json.loads((FIXTURES / "bloom.json").read_text())
CHANNEL, US, T0 = SCENARIO["channel"], SCENARIO["us"], SCENARIO["t0"]
# Recorded before requests lingered (SdsConfig.repair_linger): a due request goes at once.
CONFIG = SdsConfig(**{"repair_linger": 0.0, **SCENARIO["our_config"]})


def unpack(packed: str) -> bytes:
    return zlib.decompress(base64.b64decode(packed))


THEIRS = {name: unpack(w) for name, w in SCENARIO["theirs"].items()}


def mid(payload: str) -> str:
    return waku_message_id(payload.encode())


def replay(steps: list[dict[str, Any]]) -> tuple[SdsChannel, dict[str, list[SdsEvent]]]:
    """Run our channel through the recorded steps; every wire it makes must be the recorded one.
    Returns the channel and the events of each named step."""
    channel: SdsChannel | None = None
    events: dict[str, list[SdsEvent]] = {}
    for step in steps:
        now = step["now"]
        if step["op"] == "start":
            channel = SdsChannel(CHANNEL, US, None, CONFIG, random.Random(SCENARIO["seed"]), now)
            continue
        assert channel is not None
        if step["op"] == "send":
            wire = channel.send(bytes.fromhex(step["payload"]), now)
            assert wire == unpack(step["wire"]), f"our {step['name']} changed since generation"
            events[step["name"]] = channel.events()
        elif step["op"] == "receive":
            channel.receive(THEIRS[step["message"]], now)
            events[step["message"]] = channel.events()
        else:
            wires = channel.handle_timer(now)
            assert wires == [unpack(w) for w in step["wires"]], step["name"]
            events[step["name"]] = channel.events()
    assert channel is not None
    return channel, events


def delivered(events: list[SdsEvent]) -> list[str]:
    return [e.message_id for e in events if isinstance(e, Delivered)]


def fresh(now: float = T0) -> SdsChannel:
    return SdsChannel(CHANNEL, US, None, CONFIG, random.Random(1), now)


# --------------------------------------------------------------------------- filter and ids
def test_filter_shape_is_the_packages() -> None:
    assert (BLOOM["total_bits"], BLOOM["hashes"], BLOOM["words"]) == (150_000, 10, 2344)
    assert (WAKU_BLOOM_BITS, WAKU_BLOOM_HASHES, WAKU_BLOOM_BYTES) == (150_000, 10, 2344 * 8)
    assert len(unpack(BLOOM["filter"])) == WAKU_BLOOM_BYTES


def test_hashing_and_filter_bytes_match_the_package() -> None:
    ours = RollingBloomFilter(WAKU_BLOOM, 10_000, waku_bloom_indices)
    for item, indices in BLOOM["indices"].items():
        assert [waku_hash_n(item, n) for n in range(10)] == indices, item
        ours.add(item)
    assert ours.to_bytes() == unpack(BLOOM["filter"])
    view = BloomView(unpack(BLOOM["filter"]), WAKU_BLOOM, max_bits=WAKU_BLOOM.bits)
    for item in BLOOM["indices"]:
        assert view.contains_indices(waku_bloom_indices(item))
    assert not view.contains_indices(waku_bloom_indices(mid("never inserted")))


def test_their_messages_are_named_by_their_payload_hash() -> None:
    for name in ("a0", "a1", "b0"):
        event = decode_event_in("waku", THEIRS[name])
        assert event.message_id == mid(name) and event.content == name.encode()
        assert event.signature is None and event.lamport is not None
    tx = decode_transmission(THEIRS["a3"], check_id=False, verify_signature=False)
    assert len(tx.bloom_filter or b"") == WAKU_BLOOM_BYTES and tx.bloom_params is None
    assert [h.message_id for h in tx.event.causal_history] == [mid("a0"), mid("a1"), mid("a2")]
    assert {h.sender_id for h in tx.event.causal_history} == {"alice"}


# --------------------------------------------------------------------------- causal order
def test_their_messages_are_delivered_in_causal_order_when_a0_arrives_last() -> None:
    ch = fresh()
    for i, name in enumerate(("a1", "a2", "a3")):
        ch.receive(THEIRS[name], T0 + 1.0 + i)
        events = ch.events()
        assert delivered(events) == []
    missing = [e for e in ch.events() if isinstance(e, MissingDependencies)]
    assert ch.layers.incoming.missing_ids == {mid("a0")} and not missing  # reported above, once
    # Their sync message names a0..a3: nothing to deliver, nothing new missing.
    ch.receive(THEIRS["alice_sync"], T0 + 5.0)
    assert delivered(ch.events()) == []
    ch.receive(THEIRS["a0"], T0 + 6.0)
    assert delivered(ch.events()) == [mid("a0"), mid("a1"), mid("a2"), mid("a3")]
    lamports = [lamport for lamport, _ in ch.layers.log.entries()]
    assert lamports == sorted(lamports) and len(lamports) == 4
    # A copy (the repair answer) is a duplicate.
    ch.receive(THEIRS["a0_repair"], T0 + 7.0)
    assert delivered(ch.events()) == []


def test_a0_missing_is_reported_with_its_sender() -> None:
    ch = fresh()
    ch.receive(THEIRS["a1"], T0 + 1.0)
    (missing,) = [e for e in ch.events() if isinstance(e, MissingDependencies)]
    assert [(m.message_id, m.sender_id) for m in missing.entries] == [(mid("a0"), "alice")]


def test_their_sync_message_reveals_what_we_miss() -> None:
    ch = fresh()
    ch.receive(THEIRS["alice_sync"], T0 + 1.0)
    events = ch.events()
    assert delivered(events) == []
    assert ch.layers.incoming.missing_ids == {mid(f"a{i}") for i in range(4)}


# --------------------------------------------------------------------------- repair
def test_we_ask_alice_for_a0_and_take_her_answer() -> None:
    _ch, events = replay(SCENARIO["repair_steps"])
    (asked,) = [e for e in events["repair_request"] if isinstance(e, RepairRequested)]
    assert asked.message_ids == (mid("a0"),)
    step = next(s for s in SCENARIO["repair_steps"] if s.get("name") == "repair_request")
    request = decode_transmission(unpack(step["wires"][0]), check_id=False,
                                  verify_signature=False)
    assert request.event.is_sync and request.event.message_id.startswith("sync-")
    assert [(r.message_id, r.sender_id) for r in request.repair_request] == [(mid("a0"), "alice")]
    # Alice (the package) answered by rebroadcasting a0, which completes our log.
    assert delivered(events["a0_repair"]) == [mid("a0"), mid("a1")]


def test_we_answer_bobs_repair_request() -> None:
    _ch, events = replay(SCENARIO["main_steps"])
    answered = [e for e in events["repair_answer"] if isinstance(e, RepairAnswered)]
    assert [e.message_id for e in answered] == [mid("o5")]


# --------------------------------------------------------------------------- acknowledgements
def test_their_filter_and_history_acknowledge_ours() -> None:
    ch, events = replay(SCENARIO["main_steps"])
    acks = {(e.message_id, e.by_bloom) for e in events["b0"] if isinstance(e, Acknowledged)}
    # b0 names o2 in its history (bob keeps one entry) and has o0, o1 in its filter.
    assert acks == {(mid("o2"), False), (mid("o0"), True), (mid("o1"), True)}
    assert delivered(events["b0"]) == [mid("b0")]
    # bob's sync message: o4 by history, o3 by the filter alone.
    acks = {(e.message_id, e.by_bloom) for e in events["bob_sync"]
            if isinstance(e, Acknowledged)}
    assert acks == {(mid("o4"), False), (mid("o3"), True)}
    # Bob's repair request names o6 in its history; o5, which bob lacked, is still ours to
    # resend (our repair answer reached bob, but nothing of bob's acknowledged it since).
    assert ch.layers.outgoing.ids == {mid("o5")}


def test_our_filter_holds_their_ids_the_way_the_package_reads_it() -> None:
    # What bob acknowledged from our o3/o4 (checked by the generator with the package) is
    # in our filter at the bits the package tests.
    steps = SCENARIO["main_steps"]
    o4 = next(s for s in steps if s.get("name") == "o4")
    tx = decode_transmission(unpack(o4["wire"]), check_id=False, verify_signature=False)
    assert tx.bloom_params is None  # no parameters on the wire: the package's fixed shape
    view = BloomView(tx.bloom_filter or b"", WAKU_BLOOM, max_bits=WAKU_BLOOM.bits)
    for name in ("b0", "b1", "o0", "o4"):
        assert view.contains_indices(waku_bloom_indices(mid(name))), name
    assert tx.event.signature is None and tx.event.message_id == mid("o4")
    observed = SCENARIO["observed_by_waku"]["bob<-o4"]
    assert observed["decoded"]["message_id"] == mid("o4")
    assert {"kind": "acknowledged", "id": mid("b0")} in observed["events"]


def test_their_ephemeral_message() -> None:
    ch = fresh()
    ch.receive(THEIRS["bob_ephemeral"], T0 + 1.0)
    (got,) = ch.events()
    assert isinstance(got, EphemeralReceived) and got.content == b"e0"


# --------------------------------------------------------------------------- trust
def test_unsigned_messages_only_on_waku_channels() -> None:
    syncnode = SdsChannel(CHANNEL, US, None, replace(CONFIG, profile="syncnode"))
    with pytest.raises(RemoteProtocolError):
        syncnode.receive(THEIRS["a0"], T0 + 1.0)
    assert syncnode.events() == []


def test_a_payload_that_does_not_match_its_id_is_rejected() -> None:
    wire = THEIRS["a0"].replace(b"a0", b"A0")  # the content field; the id still says "a0"
    ch = fresh()
    with pytest.raises(RemoteProtocolError, match="sha256 of the payload"):
        ch.receive(wire, T0 + 1.0)
    assert ch.events() == [] and ch.layers.log.entries() == []


def with_sender(wire: bytes, sender: str) -> bytes:
    msg = sds_pb2.Message()
    msg.ParseFromString(wire)
    msg.sender_id = sender
    return msg.SerializeToString()


@pytest.mark.parametrize("length", [129, 200, 256])
def test_a_sender_id_longer_than_the_events_table_holds_is_refused(length: int) -> None:
    # Unsigned waku messages let a peer name any sender; the events table stores 128 characters.
    ch = fresh()
    with pytest.raises(RemoteProtocolError, match="sender id longer than 128 characters"):
        ch.receive(with_sender(THEIRS["a0"], "s" * length), T0 + 1.0)
    assert ch.events() == [] and ch.layers.log.entries() == []


def test_a_sender_id_of_128_characters_is_delivered() -> None:
    ch = fresh()
    ch.receive(with_sender(THEIRS["a0"], "s" * 128), T0 + 1.0)
    assert delivered(ch.events()) == [mid("a0")]


def test_a_filter_of_another_shape_is_rejected_without_state_change() -> None:
    ours = fresh()
    wire = ours.send(b"x", T0 + 1.0)
    assert len(decode_transmission(wire, check_id=False, verify_signature=False)
               .bloom_filter or b"") == WAKU_BLOOM_BYTES
    other = fresh()
    truncated = wire[:-1]  # the filter is the last field: one byte short
    with pytest.raises(RemoteProtocolError):
        other.receive(truncated, T0 + 2.0)
    assert other.events() == [] and other.layers.log.entries() == []


def test_sending_the_same_payload_twice_is_refused() -> None:
    ch = fresh()
    ch.send(b"same", T0 + 1.0)
    with pytest.raises(Exception, match="sent already"):
        ch.send(b"same", T0 + 2.0)
