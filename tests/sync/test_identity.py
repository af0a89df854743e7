from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.identity import b58decode, b58encode, peer_id_of, public_key_from_peer_id, sign, verify


@given(st.binary(max_size=64))
def test_base58_roundtrip(data: bytes) -> None:
    assert b58decode(b58encode(data)) == data


def test_peer_id_embeds_the_public_key_and_verifies_signatures() -> None:
    key = Ed25519PrivateKey.generate()
    peer = peer_id_of(key)
    assert peer.startswith("12D3KooW")
    assert public_key_from_peer_id(peer).public_bytes_raw() == key.public_key().public_bytes_raw()
    signature = sign(key, b"payload")
    assert verify(peer, signature, b"payload")
    assert not verify(peer, signature, b"payload!")
    assert not verify(peer, signature[:-1], b"payload")
    assert not verify(peer_id_of(Ed25519PrivateKey.generate()), signature, b"payload")


@settings(max_examples=200)
@given(st.text(max_size=80), st.binary(max_size=80))
def test_arbitrary_peer_ids_and_signatures_never_raise(peer: str, signature: bytes) -> None:
    assert verify(peer, signature, b"x") is False
    try:
        public_key_from_peer_id(peer)
    except RemoteProtocolError:
        pass
    else:
        pytest.fail("an arbitrary string decoded as an Ed25519 peer id")
