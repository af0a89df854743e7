"""Wire format, identity, signatures and the canonical event encoding."""

from __future__ import annotations

import pytest

from sync.errors import RemoteProtocolError
from sync.identity import peer_id_of
from sync.sds import (
    SIGNATURE_DOMAIN,
    Delivered,
    HistoryRef,
    decode_event,
    decode_transmission,
    encode_event,
    event_digest,
    message_id_of,
    sds_pb2,
    transmission_suffix,
)
from sync.sds.bloom import BloomParams
from tests.sync.sds.helpers import CHANNEL, T0, channel, key


def test_spec_field_numbers() -> None:
    entry = {f.name: f.number for f in sds_pb2.HistoryEntry.DESCRIPTOR.fields}
    assert entry == {"message_id": 1, "retrieval_hint": 2, "sender_id": 3}
    fields = {f.name: f.number for f in sds_pb2.Message.DESCRIPTOR.fields}
    spec = {
        "sender_id": 1,
        "message_id": 2,
        "channel_id": 3,
        "lamport_timestamp": 10,
        "causal_history": 11,
        "bloom_filter": 12,
        "repair_request": 13,
        "content": 20,
    }
    assert {k: fields[k] for k in spec} == spec
    assert all(fields[k] >= 30 for k in set(fields) - set(spec))


def test_message_id_is_hex_sha256_of_stable_fields() -> None:
    mid = message_id_of("c", "s", 5, ("a", "b"), b"x")
    assert mid == event_digest("c", "s", 5, ("a", "b"), b"x").hex()
    assert len(mid) == 64
    variants = [
        message_id_of("c2", "s", 5, ("a", "b"), b"x"),
        message_id_of("c", "s2", 5, ("a", "b"), b"x"),
        message_id_of("c", "s", 6, ("a", "b"), b"x"),
        message_id_of("c", "s", None, ("a", "b"), b"x"),
        message_id_of("c", "s", 5, ("b", "a"), b"x"),
        message_id_of("c", "s", 5, ("ab",), b"x"),
        message_id_of("c", "s", 5, ("a", "b"), b"y"),
    ]
    assert len({mid, *variants}) == len(variants) + 1


def test_signed_event_round_trip_and_signature() -> None:
    k = key(0)
    sender = peer_id_of(k)
    history = (HistoryRef("h1", b"hint", "someone"), HistoryRef("h2"))
    ev = encode_event(CHANNEL, sender, 42, history, b"payload", k)
    digest = event_digest(CHANNEL, sender, 42, ("h1", "h2"), b"payload")
    assert ev.message_id == digest.hex()
    assert ev.signature is not None
    k.public_key().verify(ev.signature, SIGNATURE_DOMAIN + digest)
    back = decode_event(ev.wire)
    assert back == ev
    assert back.causal_history == history


def test_transmission_is_canonical_wire_plus_suffix() -> None:
    k = key(0)
    ev = encode_event(CHANNEL, peer_id_of(k), 7, (), b"x", k)
    params = BloomParams(16, 2)
    data = ev.wire + transmission_suffix(b"\x01\x02", params, (HistoryRef("r1", None, "s"),))
    tx = decode_transmission(data)
    assert tx.event.wire == ev.wire
    assert tx.bloom_filter == b"\x01\x02" and tx.bloom_params == params
    assert tx.repair_request == (HistoryRef("r1", None, "s"),)
    # The stored form drops per-transmission fields: decode_event of a transmission is canonical.
    assert decode_event(data).wire == ev.wire


def _tamper(wire: bytes, **changes: object) -> bytes:
    msg = sds_pb2.Message()
    msg.ParseFromString(wire)
    for name, value in changes.items():
        setattr(msg, name, value)
    return msg.SerializeToString()


def test_rejects_forged_id_signature_or_unsigned() -> None:
    k = key(0)
    ev = encode_event(CHANNEL, peer_id_of(k), 7, (), b"x", k)
    with pytest.raises(RemoteProtocolError, match="message id"):
        decode_event(_tamper(ev.wire, content=b"y"))
    other = encode_event(CHANNEL, peer_id_of(k), 7, (), b"y", k)
    with pytest.raises(RemoteProtocolError, match="signature"):
        decode_event(_tamper(other.wire, signature=ev.signature))
    impostor = encode_event(CHANNEL, peer_id_of(key(1)), 7, (), b"x", k)
    with pytest.raises(RemoteProtocolError, match="signature"):
        decode_event(impostor.wire)
    unsigned = encode_event(CHANNEL, peer_id_of(k), 7, (), b"x", None)
    with pytest.raises(RemoteProtocolError, match="not signed"):
        decode_event(unsigned.wire)
    assert decode_event(unsigned.wire, verify_signature=False).message_id == unsigned.message_id


def test_decode_limits() -> None:
    ev = encode_event(CHANNEL, "s", 1, tuple(HistoryRef(f"h{i}") for i in range(65)), b"x", None)
    with pytest.raises(RemoteProtocolError, match="too many"):
        decode_event(ev.wire, verify_signature=False)
    with pytest.raises(RemoteProtocolError, match="too large"):
        decode_event(b"\x00" * 100, max_size=10)
    with pytest.raises(RemoteProtocolError, match="neither"):
        decode_event(sds_pb2.Message(sender_id="s", message_id="m").SerializeToString())


def test_foreign_implementation_message_is_accepted_without_our_extensions() -> None:
    """A message as another SDS implementation sends it: its own id scheme, no signature, and
    a bloom filter we cannot read (no parameters). Accepted when checks are configured off."""
    from sync.sds import SdsConfig

    ch = channel(0, signed=False, config=SdsConfig(check_message_ids=False))
    foreign = sds_pb2.Message(
        sender_id="js-peer",
        message_id="opaque-id",
        channel_id=CHANNEL,
        lamport_timestamp=int(T0 * 1000),
        bloom_filter=b"\xff" * 10,
        content=b"hi",
    )
    foreign.causal_history.add(message_id="")  # an empty id is malformed ...
    with pytest.raises(RemoteProtocolError):
        ch.receive(foreign.SerializeToString(), T0)
    del foreign.causal_history[:]
    ch.receive(foreign.SerializeToString(), T0)  # ... without it the message is delivered
    assert [e.message_id for e in ch.events() if isinstance(e, Delivered)] == ["opaque-id"]


@pytest.mark.parametrize("extra", [
    {},
    {"bloom_filter": b"", "bloom_bits": 0, "bloom_hashes": 0, "bloom_signature": b"",
     "repair_signature": b""},
    {"bloom_filter": b"\x01\x02", "bloom_bits": 16, "bloom_hashes": 2,
     "bloom_signature": b"s" * 64, "repair_signature": b"r" * 64},
])
def test_per_transmission_fields_never_reach_the_canonical_wire(extra: dict[str, object]
                                                                 ) -> None:
    """Present (even empty or zero) or absent, the per-transmission fields are cleared: the
    decoder clears only those it found (the receive path's fast form), and the canonical
    wire is the encoder's own."""
    k = key(1)
    event = encode_event(CHANNEL, peer_id_of(k), 5, (), b"content", k)
    msg = sds_pb2.Message()
    msg.ParseFromString(event.wire)
    for name, value in extra.items():
        setattr(msg, name, value)
    msg.repair_request.add(message_id="ab" * 32)
    tx = decode_transmission(msg.SerializeToString())
    assert tx.event.wire == event.wire
    assert tx.repair_request[0].message_id == "ab" * 32
