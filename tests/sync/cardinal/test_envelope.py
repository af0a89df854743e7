"""sync.cardinal.envelope: one Cardinal message as the content of one event."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.cardinal import decode_envelope, encode_envelope
from sync.errors import RemoteProtocolError


def test_envelope_round_trip() -> None:
    for reorg in (None, "blocks/reorg/" + "ab" * 32):
        env = decode_envelope(encode_envelope(b"\x00key", b"value", reorg))
        assert (env.key, env.value, env.reorg_channel) == (b"\x00key", b"value", reorg)
    assert encode_envelope(b"k", b"v") == b"\x00\x01kv"


@pytest.mark.parametrize("content", [
    b"", b"\x02\x01kv", b"\x00", b"\x00\x80", b"\x00\x05kv", b"\x00\x80\x00k",
    b"\x01\x00\x01kv", b"\x01\x05ab", b"\x01\x02\xff\xfe\x01kv", b"\x00\xff\xff\x03" + b"k" * 9,
])
def test_envelope_malformed(content: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_envelope(content)


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=64))
def test_envelope_fuzz(content: bytes) -> None:
    try:
        env = decode_envelope(content)
    except RemoteProtocolError:
        return
    assert encode_envelope(env.key, env.value, env.reorg_channel) == content
