"""ceramic-one (rust-ceramic) interop: its EventId vectors and its Recon word-list vector.

Expected values are transcribed from rust-ceramic's own tests (``core/src/event_id.rs``:
``blessing``, ``test_deserialize``, ``debug``, ``cid``, ``test_swap_cid``;
``recon/src/recon/tests.rs``: ``word_lists``; ``recon/src/sha256a.rs``: ``hello``, ``other``).
"""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.recon import MemoryKeyStore, Sha256a, lanes_of, reconcile_in_memory
from sync.recon.eventid import (
    CERAMIC_ONE,
    CIP124_DRAFT,
    build_event_id,
    channel_bounds,
    event_cid,
    event_id_layout_of,
    event_key,
    genesis_cid,
    key_height,
    parse_event_id,
    sender_bounds,
)

FIXTURES = Path(__file__).parent / "fixtures" / "rust-ceramic"
WORD_LISTS = ("bip_39", "eff_large_wordlist", "eff_short_wordlist_1", "eff_short_wordlist_2",
              "wordle_words5_big", "wordle_words5")
WORD_LIST_HASH = "495BF24CE0DB5C33CE846ADCD6D9A87592E05324585D85059C3DC2113B500F79"
WORD_LIST_COUNT = 21139

SEP_KEY = b"model"
SEPARATOR = "kh4q0ozorrgaq2mezktnrmdwleo1d"  # base36 multibase of the model's stream id
CONTROLLER = b"did:key:z6MkgSV3tAuw7gUWqKCUY7ae6uWNxqYgdwPhUJbJhF9EFXm9"
INIT = "bagcqceraplay4erv6l32qrki522uhiz7rf46xccwniw7ypmvs3cvu2b3oulq"
EVENT = "bafyreihu557meceujusxajkaro3epfe6nnzjgbjaxsapgtml7ox5ezb5qy"
TAIL = ("ba25076d730241e745cc7c072ff729ea683b751701711220f4ef7ec208944d257025408bb647949e6b"
        "72930520bc80f34d8bfbafd2643d86")
# (network, its id in rust-ceramic's Network::id, expected multibase base16 of the EventId)
BLESSING = [
    ("Mainnet", 0x00, "fce010500" + TAIL),
    ("TestnetClay", 0x01, "fce010501" + TAIL),
    ("DevUnstable", 0x02, "fce010502" + TAIL),
    ("InMemory", 0xFF, "fce0105ff01" + TAIL),
    ("Local(0xce4a441c)", 0x1_0000_0000 + 0xCE4A441C, "fce01059c88a9f21c" + TAIL),
]
# test_serialize / test_deserialize: the Mainnet id as a DAG-CBOR byte string (major type 2).
DAG_CBOR = "583cce010500" + TAIL


def _base32(text: str) -> bytes:
    assert text[0] == "b"  # multibase base32 lower, no padding
    body = text[1:].upper()
    return base64.b32decode(body + "=" * (-len(body) % 8))


def _base36(text: str) -> bytes:
    assert text[0] == "k"  # multibase base36 lower; no leading '0' digits in this vector
    n = int(text[1:], 36)
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


def _ceramic_event_id(network_id: int, event: bytes) -> bytes:
    # rust-ceramic hashes the separator key and value back to back (no "|").
    return build_event_id(network_id, SEP_KEY + _base36(SEPARATOR), CONTROLLER, _base32(INIT),
                          None, event)


@pytest.mark.parametrize(("network", "network_id", "expected"), BLESSING)
def test_blessing_vectors_encode_byte_for_byte(network: str, network_id: int,
                                               expected: str) -> None:
    assert "f" + _ceramic_event_id(network_id, _base32(EVENT)).hex() == expected, network


@pytest.mark.parametrize(("network", "network_id", "expected"), BLESSING)
def test_blessing_vectors_parse(network: str, network_id: int, expected: str) -> None:
    data = bytes.fromhex(expected[1:])
    parsed = parse_event_id(data)
    assert parsed.network_id == network_id, network
    assert parsed.height is None and parsed.layout == CERAMIC_ONE
    assert event_id_layout_of(data) == CERAMIC_ONE
    assert key_height(data) is None
    # The debug vector's fields.
    assert parsed.separator.hex() == "ba25076d730241e7"
    assert parsed.controller.hex() == "45cc7c072ff729ea"
    assert parsed.init_tail.hex() == "683b7517"
    assert parsed.event_cid == _base32(EVENT)  # the `cid` test: the CID comes back out
    assert parsed.codec == 0x71
    assert parsed.to_bytes() == data
    assert parse_event_id(data, CERAMIC_ONE) == parsed
    with pytest.raises(RemoteProtocolError, match="cip124-draft"):
        parse_event_id(data, CIP124_DRAFT)


def test_dag_cbor_byte_string_of_the_mainnet_id() -> None:
    raw = bytes.fromhex(DAG_CBOR)
    assert raw[0] == 0x58 and raw[1] == len(raw) - 2  # bytes(60), one-byte length
    assert parse_event_id(raw[2:]).network_id == 0


def test_swap_cid_keeps_the_stream_part() -> None:
    # test_swap_cid: the init CID (a longer CID) in place of the event CID, and back.
    original = _ceramic_event_id(0, _base32(EVENT))
    swapped = _ceramic_event_id(0, _base32(INIT))
    assert swapped != original and swapped[:23] == original[:23]
    parsed = parse_event_id(swapped)
    assert parsed.event_cid == _base32(INIT) and parsed.codec == 0x85
    assert _ceramic_event_id(0, parse_event_id(original).event_cid) == original


def test_fenceposts_without_an_event_cid_are_no_event_ids() -> None:
    # no_cid: a stream's min (nothing after the init tail) and max (0xff) fence posts.
    stream = _ceramic_event_id(0, b"")
    for fence in (stream, stream + b"\xff"):
        with pytest.raises(RemoteProtocolError):
            parse_event_id(fence)


def test_the_draft_and_ceramic_one_layouts_are_told_apart() -> None:
    digest = bytes(range(32))
    for height in (0, 1, 2, 23, 24, 255, 2**40):
        draft = event_key(3, "chat", "peer", height, digest)
        assert parse_event_id(draft).height == height
        assert event_id_layout_of(draft) == CIP124_DRAFT
    one = event_key(3, "chat", "peer", 1, digest, CERAMIC_ONE)
    assert one == event_key(3, "chat", "peer", 99, digest, CERAMIC_ONE)  # no height in it
    parsed = parse_event_id(one)
    assert parsed.height is None and parsed.digest == digest and parsed.codec == 0x55
    assert one == build_event_id(3, b"chat", b"peer", genesis_cid("chat", "peer"), None,
                                 event_cid(digest))
    for lo, hi in (channel_bounds(3, "chat"), sender_bounds(3, "chat", "peer")):
        assert lo <= one < hi
    with pytest.raises(ValueError, match="layout"):
        event_key(3, "chat", "peer", 1, digest, "ceramic-two")


@given(network_id=st.integers(0, 2**40), channel=st.text(max_size=12),
       sender=st.text(max_size=30), lamport=st.integers(0, 2**64 - 1),
       digest=st.binary(min_size=32, max_size=32),
       layout=st.sampled_from([CIP124_DRAFT, CERAMIC_ONE]))
def test_both_layouts_round_trip(network_id: int, channel: str, sender: str, lamport: int,
                                 digest: bytes, layout: str) -> None:
    key = event_key(network_id, channel, sender, lamport, digest, layout)
    parsed = parse_event_id(key, layout)
    assert parsed.layout == layout and parsed.digest == digest
    assert parsed.to_bytes() == key
    assert key_height(key) == (lamport if layout == CIP124_DRAFT else None)


def test_sha256a_hello_and_other() -> None:
    assert Sha256a.of([b"hello"]).hex().upper() == (
        "2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824")
    assert Sha256a.of([b"other"]).hex().upper() == (
        "D9298A10D1B0735837DC4BD85DAC641B0F3CEF27A47E5D53A54F2F3F5B2FCFFA")
    assert lanes_of(b"other") == (277490137, 1483976913, 3628850231, 459582557, 669989903,
                                  1398636196, 1060065189, 4207882075)


def _words(name: str) -> list[bytes]:
    return gzip.decompress((FIXTURES / f"{name}.txt.gz").read_bytes()).split()


def test_word_lists_reconcile_to_the_published_hash() -> None:
    # word_lists: a local store reconciles three rounds with six peers, one per list; then
    # every store holds the union, whose Sha256a and count are the published ones.
    lists = [_words(name) for name in WORD_LISTS]
    peers = [MemoryKeyStore() for _ in lists]
    for store, words in zip(peers, lists, strict=True):
        for word in words:
            store.insert(word)
    local = MemoryKeyStore()
    full = [(b"", b"\xff")]
    for _ in range(3):
        for peer in peers:
            reconcile_in_memory(local, peer, full, full)
    expected = f"{WORD_LIST_HASH}#{WORD_LIST_COUNT}"
    for store in (local, *peers):
        value = store.range_hash(b"", b"\xff")
        assert f"{value.hex().upper()}#{value.count}" == expected
    union = sorted({w for words in lists for w in words})
    assert local.keys(b"", b"\xff", len(union) + 1) == union
