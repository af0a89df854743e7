"""Signed peer records: only a record signed by the peer it names counts."""

from __future__ import annotations

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.envelope import seal_record
from libp2p.peer.id import ID
from libp2p.peer.peer_record import PeerRecord
from multiaddr import Multiaddr

from node.p2p.records import LocalRecord, RecordError, open_record


def test_local_record_round_trip_and_readvertise() -> None:
    key = create_new_key_pair()
    peer = ID.from_pubkey(key.public_key)
    local = LocalRecord(peer, key.private_key, [f"/ip4/127.0.0.1/tcp/4001/p2p/{peer}"])
    opened = open_record(local.envelope, 4096)
    assert opened.peer_id == peer.to_base58() and opened.addrs == ("/ip4/127.0.0.1/tcp/4001",)
    first = local.seq
    assert not local.advertise(["/ip4/127.0.0.1/tcp/4001"])  # unchanged: not re-signed
    relayed = f"/ip4/198.18.0.1/tcp/4001/p2p/{ID.from_pubkey(create_new_key_pair().public_key)}" \
              "/p2p-circuit"
    assert local.advertise(["/ip4/127.0.0.1/tcp/4001", relayed])
    again = open_record(local.envelope, 4096)
    assert again.seq > first and relayed in again.addrs


def test_records_signed_by_another_key_or_malformed_are_refused() -> None:
    victim, forger = create_new_key_pair(), create_new_key_pair()
    record = PeerRecord(ID.from_pubkey(victim.public_key), [Multiaddr("/ip4/1.2.3.4/tcp/1")], 5)
    forged = seal_record(record, forger.private_key).marshal_envelope()
    with pytest.raises(RecordError, match="signed by"):
        open_record(forged, 4096)
    good = seal_record(record, victim.private_key).marshal_envelope()
    tampered = good[:-1] + bytes([good[-1] ^ 1])
    for data in (tampered, b"garbage", b""):
        with pytest.raises(RecordError):
            open_record(data, 4096)
    with pytest.raises(RecordError, match="limit"):
        open_record(good, 16)
