"""sync.stored_event: every write path builds the same record for the same event."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.identity import peer_id_of
from sync.recon.eventid import CERAMIC_ONE, CIP124_DRAFT, event_key, parse_event_id
from sync.sds import Delivered, SdsChannel, decode_event, encode_event
from sync.stored_event import record_of_delivered, record_of_event

NETWORK_ID = 7
KEY = Ed25519PrivateKey.from_private_bytes(bytes([3]) * 32)
ME = peer_id_of(KEY)


@pytest.mark.parametrize("layout", [CIP124_DRAFT, CERAMIC_ONE])
def test_delivered_and_decoded_event_give_one_record(layout: str) -> None:
    channel = SdsChannel("general", ME, KEY, now=1_000.0)
    for i in range(3):
        channel.send(b"hello %d" % i, 1_000.0 + i)
    delivered = [e for e in channel.events() if isinstance(e, Delivered)]
    assert len(delivered) == 3
    for ev in delivered:
        from_delivery = record_of_delivered(NETWORK_ID, "general", ev, layout)
        from_wire = record_of_event(NETWORK_ID, decode_event(ev.wire), layout)
        assert from_delivery == from_wire
        assert from_wire.recon_key == event_key(NETWORK_ID, "general", ME, ev.lamport,
                                                bytes.fromhex(ev.message_id), layout)
        assert parse_event_id(from_wire.recon_key).layout == layout
        assert (from_wire.channel, from_wire.sender, from_wire.wire) == ("general", ME, ev.wire)


def test_ephemeral_events_have_no_record() -> None:
    ev = encode_event("general", ME, None, (), b"x", KEY)
    with pytest.raises(ValueError, match="ephemeral"):
        record_of_event(NETWORK_ID, ev)
