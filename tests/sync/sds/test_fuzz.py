"""Decoder fuzzing: arbitrary and mutated input only ever raises RemoteProtocolError, and a
rejected message changes nothing."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.sds import SdsChannel, SdsConfig, decode_event, sds_pb2
from sync.sds.state import encode_state
from tests.sync.sds.helpers import CHANNEL, T0, channel

LOOSE = SdsConfig(check_message_ids=False)


def _valid_transmissions() -> list[bytes]:
    a, b, c = channel(0), channel(1), channel(2)
    out = [a.send(b"a0", T0), a.send(b"a1", T0)]
    b.receive(out[1], T0)  # b misses a0: its messages carry a repair request later
    out.append(b.send(b"b0", T0))
    out.extend(b.handle_timer(T0 + 1000))
    out.append(c.send(b"eph", T0, ephemeral=True))
    return out


VALID = _valid_transmissions()


def _snapshot(ch: SdsChannel) -> tuple[object, ...]:
    layers = ch.layers
    return (layers.log.entries(), layers.incoming.waiting_ids, layers.incoming.missing_ids,
            layers.outgoing.ids, layers.incoming.lamport)


def _feed(ch: SdsChannel, data: bytes) -> None:
    ch.events()
    before = _snapshot(ch)
    try:
        ch.receive(data, T0 + 1)
    except RemoteProtocolError:
        assert _snapshot(ch) == before
        assert ch.events() == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes(data: bytes) -> None:
    _feed(channel(5), data)
    _feed(channel(5, signed=False, config=LOOSE), data)
    with contextlib.suppress(RemoteProtocolError):
        decode_event(data)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[pos : pos + draw(st.integers(1, 8))]
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(mutated())
def test_mutated_valid_messages(data: bytes) -> None:
    _feed(channel(5), data)
    _feed(channel(5, signed=False, config=LOOSE), data)


@st.composite
def structured(draw: st.DrawFn) -> bytes:
    """Well-formed protobuf with hostile field values (checks off to reach deeper code)."""
    text = st.text(max_size=8)
    entry = st.builds(
        lambda mid, hint, sender: sds_pb2.HistoryEntry(
            message_id=mid, retrieval_hint=hint, sender_id=sender
        ),
        text,
        st.binary(max_size=8),
        text,
    )
    msg = sds_pb2.Message(
        sender_id=draw(text),
        message_id=draw(text),
        channel_id=draw(st.sampled_from([CHANNEL, "", "x"])),
    )
    if draw(st.booleans()):
        msg.lamport_timestamp = draw(st.integers(0, 2**64 - 1))
    msg.causal_history.extend(draw(st.lists(entry, max_size=4)))
    msg.repair_request.extend(draw(st.lists(entry, max_size=4)))
    if draw(st.booleans()):
        msg.bloom_filter = draw(st.binary(max_size=16))
        msg.bloom_bits = draw(st.integers(0, 2**32 - 1))
        msg.bloom_hashes = draw(st.integers(0, 2**32 - 1))
    if draw(st.booleans()):
        msg.content = draw(st.binary(max_size=8))
    return msg.SerializeToString()


@settings(max_examples=300, deadline=None)
@given(st.lists(structured(), min_size=1, max_size=4))
def test_structured_hostile_messages(messages: list[bytes]) -> None:
    ch = channel(5, signed=False, config=LOOSE)
    for data in messages:
        _feed(ch, data)
    ch.handle_timer(T0 + 10_000)


def _state() -> bytes:
    a, b = channel(0), channel(1)
    wires = [a.send(f"a{i}".encode(), T0) for i in range(3)]
    b.receive(wires[2], T0)
    return encode_state(b.snapshot())


STATE = _state()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(STATE) - 1), st.binary(min_size=1, max_size=4), st.integers(0, 4))
def test_mutated_state_only_raises_remote_protocol_error(pos: int, insert: bytes, cut: int) -> None:
    state = STATE[:pos] + insert + STATE[pos + cut :]
    try:
        restored = SdsChannel.restore(state, None, verify_signatures=False)
    except RemoteProtocolError:
        return
    assert 0 <= restored.layers.incoming.lamport < 1 << 64
    restored.handle_timer(T0 + 10_000)  # whatever was restored runs
