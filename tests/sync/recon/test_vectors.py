"""Conformance vectors from tests/testdata/vectors.md: Sha256a and the eventId layout."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.recon import (
    Sha256a,
    channel_bounds,
    event_key,
    lanes_of,
    network_bounds,
    parse_event_id,
    sender_bounds,
    wide_of,
)
from sync.recon.eventid import build_event_id, cbor_uint, event_cid, genesis_cid, key_height

YOU = [b"ape", b"eel", b"fox", b"gnu"]
THEY = [b"bee", b"cat", b"doe", b"eel", b"fox", b"hog"]
SHA256A_VECTORS = [
    ([b"hello"], "2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824"),
    ([b"hello world"], "B94D27B9934D3E08A52E52D7DA7DABFAC484EFE37A5380EE9088F7ACE2EFCDE9"),
    (YOU, "7D694295C4C3FBA5E489A687370599F3EFB4A8C5B0BFE374D66EB3B8D7CB9484"),
    (THEY, "CF16442BFD6DAD01367CE57F40803B847CC5032616842B467BFDF21B8C44DA24"),
    (
        sorted(set(YOU) | set(THEY)),
        "65676C89F5B1C88B01160867B7E258A20B8E6B83CAD6145ABB0CAD34FA92387D",
    ),
    ([b"eel", b"fox"], "E7181A37CC7FE01B19F083A0C0A27BD560EC4068FC6CFA60965FF99F697D362C"),
    ([b"bee", b"cat"], "D97AF940E1F5FAD2BF0B2E085514B6988EF11DE430700B17A2A197DCADA5DC62"),
]
EVENT_ID = (
    "ce0105007e710e217fa0e25945cc7c072ff729ea683b751718ff01711220f4ef7ec208944d257025408bb6"
    "47949e6b72930520bc80f34d8bfbafd2643d86"
)
INIT_CID = "01850112207ac18e1235f2f7a84548eeb543a33f8979eb88566a2dfc3d9596c55a683b7517"
EVENT_CID = "01711220f4ef7ec208944d257025408bb647949e6b72930520bc80f34d8bfbafd2643d86"


@pytest.fixture(scope="module")
def readme(testdata: Path) -> str:
    return (testdata / "vectors.md").read_text()


@pytest.mark.parametrize(("elements", "expected"), SHA256A_VECTORS)
def test_sha256a_vectors(readme: str, elements: list[bytes], expected: str) -> None:
    assert expected in readme
    value = Sha256a.of(elements)
    assert value.hex().upper() == expected
    assert value.count == len(elements)
    wide = sum(map(wide_of, elements))
    assert Sha256a.from_wide(wide, len(elements)) == value


def test_sha256a_hello_lanes_and_empty() -> None:
    assert lanes_of(b"hello") == (
        3125670444,
        245608543,
        708569126,
        2665658821,
        1545475611,
        1581426463,
        1647510643,
        613976979,
    )
    assert Sha256a.of([]).digest() == bytes(32)


def test_sha256a_is_associative_with_subtraction() -> None:
    union = Sha256a.of(sorted(set(YOU) | set(THEY)))
    assert Sha256a.of(YOU) + Sha256a.of([b"bee", b"cat", b"doe", b"hog"]) == union
    assert union - Sha256a.of(YOU) == Sha256a.of([b"bee", b"cat", b"doe", b"hog"])


def _vector(network_id: int) -> bytes:
    return build_event_id(
        network_id,
        b"model|kh4q0ozorrgaq2mezktnrmdwleo1d",
        b"did:key:z6MkgSV3tAuw7gUWqKCUY7ae6uWNxqYgdwPhUJbJhF9EFXm9",
        bytes.fromhex(INIT_CID),
        255,
        bytes.fromhex(EVENT_CID),
    )


def test_event_id_vector_byte_for_byte(readme: str) -> None:
    assert EVENT_ID in readme
    assert _vector(0).hex() == EVENT_ID
    parsed = parse_event_id(bytes.fromhex(EVENT_ID))
    assert parsed.network_id == 0 and parsed.height == 255
    assert parsed.event_cid.hex() == EVENT_CID
    assert parsed.init_tail == bytes.fromhex(INIT_CID)[-4:]
    assert parsed.digest == bytes.fromhex(EVENT_CID)[4:]
    assert parsed.to_bytes().hex() == EVENT_ID


@pytest.mark.parametrize(("network_id", "field"), [(1, "01"), (2, "02"), (0xFF, "ff01")])
def test_event_id_network_ids(network_id: int, field: str) -> None:
    assert _vector(network_id).hex() == "ce0105" + field + EVENT_ID[8:]


def test_cbor_heights_sort_numerically() -> None:
    values = [0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1]
    encoded = [cbor_uint(v) for v in values]
    assert encoded == sorted(encoded)
    assert cbor_uint(255).hex() == "18ff"


def test_event_key_mapping_and_bounds() -> None:
    digest = hashlib.sha256(b"event").digest()
    sender = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
    key = event_key(7, "chat", sender, 42, digest)
    parsed = parse_event_id(key)
    assert parsed.network_id == 7 and parsed.height == 42 and parsed.digest == digest
    assert parsed.separator == hashlib.sha256(b"chat").digest()[-8:]
    assert parsed.controller == hashlib.sha256(sender.encode()).digest()[-8:]
    assert parsed.init_tail == genesis_cid("chat", sender)[-4:]
    assert parsed.event_cid[:4] == bytes([0x01, 0x55, 0x12, 0x20])
    for lo, hi in (network_bounds(7), channel_bounds(7, "chat"), sender_bounds(7, "chat", sender)):
        assert lo <= key < hi
    other = event_key(7, "chat", "someone-else", 42, digest)
    assert not sender_bounds(7, "chat", sender)[0] <= other < sender_bounds(7, "chat", sender)[1]
    assert channel_bounds(7, "chat")[0] <= other < channel_bounds(7, "chat")[1]
    assert not channel_bounds(7, "news")[0] <= key < channel_bounds(7, "news")[1]
    assert not network_bounds(8)[0] <= key < network_bounds(8)[1]
    later = [event_key(7, "chat", sender, n, digest) for n in (0, 1, 24, 300, 70000)]
    assert later == sorted(later)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xce",
        bytes.fromhex("ce0106") + bytes(30),
        bytes.fromhex(EVENT_ID)[:20],
        bytes.fromhex(EVENT_ID)[:27] + b"\x1c" + bytes.fromhex(EVENT_CID),
        bytes.fromhex(EVENT_ID)[:27] + b"\x18\x05" + bytes.fromhex(EVENT_CID),
        bytes.fromhex(EVENT_ID)[:-1],
        bytes.fromhex(EVENT_ID) + b"\x00" * 300,
    ],
)
def test_parse_event_id_rejects(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_event_id(data)


@given(
    network_id=st.integers(0, 2**32),
    channel=st.text(max_size=20),
    sender=st.text(max_size=60),
    lamport=st.integers(0, 2**64 - 1),
    digest=st.binary(min_size=32, max_size=32),
)
def test_event_key_is_the_cip124_layout_of_its_inputs(
    network_id: int, channel: str, sender: str, lamport: int, digest: bytes
) -> None:
    # event_key caches the per-stream prefix; it must stay byte-equal to the plain layout.
    expected = build_event_id(network_id, channel.encode(), sender.encode(),
                              genesis_cid(channel, sender), lamport, event_cid(digest))
    assert event_key(network_id, channel, sender, lamport, digest) == expected


@given(network_id=st.integers(0, 2**32), lamport=st.integers(0, 2**64 - 1))
def test_key_height_reads_the_lamport_time_back(network_id: int, lamport: int) -> None:
    key = event_key(network_id, "chat", "sender", lamport, bytes(32))
    assert key_height(key) == lamport


def test_key_height_of_a_truncated_key_is_an_error() -> None:
    key = event_key(1, "chat", "sender", 1_700_000_000_000, bytes(32))
    with pytest.raises(RemoteProtocolError):
        key_height(key[:22])
