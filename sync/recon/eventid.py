"""CIP-124 eventIds: the Recon keys of our events, and the fence posts of ranges over them.

Two byte layouts exist; both are decoded, and a network encodes one of them
(``[recon] event_id_layout``):

* ``cip124-draft`` (CIP-124 "EventIds", our default)::

    varint(0xce) varint(0x05) varint(network_id)
    last8(sha256(sort_value)) last8(sha256(controller)) last4(init_event_cid)
    cbor_uint(event_height) event_cid

* ``ceramic-one`` (rust-ceramic's ``EventId`` since 2024): the same without
  ``cbor_uint(event_height)``.

The parser tells them apart by the byte after the 20 hash bytes: a ceramic-one id continues with
a CIDv1 (0x01) whose codec is never 0x01 (multicodec 0x01 is the CIDv1 marker, not a content
codec), while a draft id continues with a CBOR unsigned integer, and the only draft height whose
head byte is 0x01 (height 1) is followed by a CID that again starts with 0x01.

Our events map onto it as follows (docs/recon.md has the rationale):

* sort value = the SDS channel name (UTF-8), controller = the sender's libp2p peer id (its
  base58 text, UTF-8);
* init event = :func:`genesis_cid` of the (channel, sender) stream, a CIDv1 (raw codec, sha2-256)
  that every node derives the same way without any event to point at;
* event height = the Lamport timestamp (strictly increasing per sender, so a stream sorts in
  causal order: CBOR unsigned integers of growing size have growing head bytes, so byte order
  equals numeric order); absent in the ceramic-one layout, where a stream's keys sort by event
  CID instead;
* event CID = CIDv1 (raw codec, sha2-256) whose multihash digest is the 32-byte event digest.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

from sync.errors import RemoteProtocolError
from sync.varint import read_uvarint, uvarint

__all__ = [
    "CERAMIC_ONE",
    "CIP124_DRAFT",
    "CODEC_RAW",
    "LAYOUTS",
    "MAX_EVENT_ID_LEN",
    "EventId",
    "build_event_id",
    "cbor_uint",
    "channel_bounds",
    "event_cid",
    "event_id_layout_of",
    "event_key",
    "genesis_cid",
    "key_height",
    "network_bounds",
    "parse_event_id",
    "prefix_successor",
    "sender_bounds",
    "stream_prefix",
]

STREAMID_CODE = 0xCE
EVENTID_TYPE = 0x05
CODEC_RAW = 0x55
SHA2_256 = 0x12
MAX_EVENT_ID_LEN = 256
_GENESIS_TAG = b"syncnode/recon/genesis/v1"
CIP124_DRAFT = "cip124-draft"
CERAMIC_ONE = "ceramic-one"
LAYOUTS = (CIP124_DRAFT, CERAMIC_ONE)


def cbor_uint(value: int) -> bytes:
    """The shortest CBOR encoding of an unsigned integer (major type 0)."""
    if value < 0:
        raise ValueError("cbor_uint of a negative number")
    if value < 24:
        return bytes([value])
    for head, size in ((0x18, 1), (0x19, 2), (0x1A, 4), (0x1B, 8)):
        if value < 1 << (8 * size):
            return bytes([head]) + value.to_bytes(size, "big")
    raise ValueError("cbor_uint above 2^64")


def _read_cbor_uint(data: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(data):
        raise RemoteProtocolError("eventId truncated before event height")
    head = data[pos]
    if head < 24:
        return head, pos + 1
    sizes = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}
    size = sizes.get(head)
    if size is None:
        raise RemoteProtocolError("event height is not a CBOR unsigned integer")
    end = pos + 1 + size
    if end > len(data):
        raise RemoteProtocolError("eventId truncated inside event height")
    value = int.from_bytes(data[pos + 1 : end], "big")
    if cbor_uint(value) != data[pos:end]:
        raise RemoteProtocolError("event height is not minimally encoded")
    return value, end


def _last(data: bytes, n: int) -> bytes:
    return data[-n:].rjust(n, b"\0")


def _cid_v1(codec: int, digest: bytes) -> bytes:
    return b"\x01" + uvarint(codec) + uvarint(SHA2_256) + uvarint(len(digest)) + digest


def event_cid(digest: bytes) -> bytes:
    """CIDv1(raw, sha2-256) bytes over a 32-byte event digest."""
    if len(digest) != 32:
        raise ValueError("an event digest is 32 bytes")
    return _cid_v1(CODEC_RAW, digest)


_EVENT_CID_HEAD = b"\x01" + uvarint(CODEC_RAW) + uvarint(SHA2_256) + uvarint(32)


def genesis_cid(channel: str, sender: str) -> bytes:
    """The deterministic init-event CID of the (channel, sender) stream."""
    ch, se = channel.encode(), sender.encode()
    preimage = _GENESIS_TAG + uvarint(len(ch)) + ch + uvarint(len(se)) + se
    return _cid_v1(CODEC_RAW, hashlib.sha256(preimage).digest())


def _head(network_id: int) -> bytes:
    return uvarint(STREAMID_CODE) + uvarint(EVENTID_TYPE) + uvarint(network_id)


def _separator(channel: str) -> bytes:
    return _last(hashlib.sha256(channel.encode()).digest(), 8)


def _controller(sender: str) -> bytes:
    return _last(hashlib.sha256(sender.encode()).digest(), 8)


def build_event_id(
    network_id: int,
    sort_value: bytes,
    controller: bytes,
    init_event_cid: bytes,
    event_height: int | None,
    event_cid_bytes: bytes,
) -> bytes:
    """An eventId from its raw inputs (sort value and controller are hashed here); a height of
    ``None`` gives the ceramic-one layout, which has none."""
    return b"".join(
        (
            _head(network_id),
            _last(hashlib.sha256(sort_value).digest(), 8),
            _last(hashlib.sha256(controller).digest(), 8),
            _last(init_event_cid, 4),
            b"" if event_height is None else cbor_uint(event_height),
            event_cid_bytes,
        )
    )


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown eventId layout {layout!r}")


def event_key(network_id: int, channel: str, sender: str, lamport: int, digest: bytes,
              layout: str = CIP124_DRAFT) -> bytes:
    """The Recon key of one of our events in ``layout`` (the network's configured layout)."""
    if len(digest) != 32:
        raise ValueError("an event digest is 32 bytes")
    # The same bytes as build_event_id, with the per-stream part (three hashes) cached: a
    # catch-up computes one key per fetched event.
    prefix = _stream_prefix_cached(network_id, channel, sender)
    if layout == CIP124_DRAFT:
        return prefix + cbor_uint(lamport) + _EVENT_CID_HEAD + digest
    _check_layout(layout)
    return prefix + _EVENT_CID_HEAD + digest


@lru_cache(maxsize=4096)
def _stream_prefix_cached(network_id: int, channel: str, sender: str) -> bytes:
    return stream_prefix(network_id, channel, sender)


@dataclass(frozen=True, slots=True)
class EventId:
    """A parsed eventId; ``separator``/``controller``/``init_tail`` are the truncated hashes.

    ``height`` is ``None`` for a ceramic-one id (that layout has no event height).
    """

    network_id: int
    separator: bytes
    controller: bytes
    init_tail: bytes
    height: int | None
    event_cid: bytes

    @property
    def layout(self) -> str:
        return CERAMIC_ONE if self.height is None else CIP124_DRAFT

    @property
    def codec(self) -> int:
        """The multicodec of the event CID (0x55 raw for ours, 0x71 dag-cbor for Ceramic's)."""
        return read_uvarint(self.event_cid, 1)[0]

    @property
    def digest(self) -> bytes:
        """The multihash digest inside ``event_cid`` (our 32-byte event digest)."""
        pos = 1
        _codec, pos = read_uvarint(self.event_cid, pos)
        _code, pos = read_uvarint(self.event_cid, pos)
        _size, pos = read_uvarint(self.event_cid, pos)
        return self.event_cid[pos:]

    def to_bytes(self) -> bytes:
        return b"".join(
            (
                _head(self.network_id),
                self.separator,
                self.controller,
                self.init_tail,
                b"" if self.height is None else cbor_uint(self.height),
                self.event_cid,
            )
        )


def _is_ceramic_one_tail(tail: bytes) -> bool:
    # A draft id of height 1 reads 0x01 (the height) then 0x01 (its CID's version byte).
    return len(tail) >= 2 and tail[0] == 0x01 and tail[1] != 0x01


def event_id_layout_of(data: bytes) -> str:
    """The layout of an eventId (without checking the rest of it)."""
    pos = 0
    for _ in range(3):  # stream id code, eventId type, network id
        _value, pos = read_uvarint(data, pos)
    if pos + 20 >= len(data):
        raise RemoteProtocolError("eventId truncated")
    return CERAMIC_ONE if _is_ceramic_one_tail(data[pos + 20 :]) else CIP124_DRAFT


def parse_event_id(data: bytes, layout: str | None = None) -> EventId:
    """Parse and check an eventId of either layout, or only of ``layout`` when given; anything
    malformed raises ``RemoteProtocolError``."""
    if len(data) > MAX_EVENT_ID_LEN:
        raise RemoteProtocolError("eventId too long")
    code, pos = read_uvarint(data, 0)
    kind, pos = read_uvarint(data, pos)
    if code != STREAMID_CODE or kind != EVENTID_TYPE:
        raise RemoteProtocolError("not a CIP-124 eventId")
    network_id, pos = read_uvarint(data, pos)
    if pos + 20 > len(data):
        raise RemoteProtocolError("eventId truncated")
    separator, controller, init_tail = (
        data[pos : pos + 8],
        data[pos + 8 : pos + 16],
        data[pos + 16 : pos + 20],
    )
    found = CERAMIC_ONE if _is_ceramic_one_tail(data[pos + 20 :]) else CIP124_DRAFT
    if layout is not None and layout != found:
        _check_layout(layout)
        raise RemoteProtocolError(f"eventId is not in the {layout} layout")
    height: int | None = None
    pos += 20
    if found == CIP124_DRAFT:
        height, pos = _read_cbor_uint(data, pos)
    cid = data[pos:]
    _check_cid(cid)
    return EventId(network_id, separator, controller, init_tail, height, cid)


def _check_cid(cid: bytes) -> None:
    if not cid or cid[0] != 0x01:
        raise RemoteProtocolError("event CID is not a CIDv1")
    _codec, pos = read_uvarint(cid, 1)
    _code, pos = read_uvarint(cid, pos)
    size, pos = read_uvarint(cid, pos)
    if len(cid) - pos != size:
        raise RemoteProtocolError("event CID multihash length mismatch")


def key_height(data: bytes) -> int | None:
    """The event height (our Lamport time) of an eventId, without checking the rest of it;
    ``None`` for a ceramic-one id, which carries no height."""
    pos = 0
    for _ in range(3):  # stream id code, eventId type, network id
        _value, pos = read_uvarint(data, pos)
    if _is_ceramic_one_tail(data[pos + 20 :]):
        return None
    return _read_cbor_uint(data, pos + 20)[0]


def prefix_successor(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError("no successor of an all-0xff prefix")
    return stripped[:-1] + bytes([stripped[-1] + 1])


def stream_prefix(network_id: int, channel: str, sender: str | None = None) -> bytes:
    """The key prefix shared by a whole channel, or by one sender's stream in it."""
    prefix = _head(network_id) + _separator(channel)
    if sender is not None:
        prefix += _controller(sender) + _last(genesis_cid(channel, sender), 4)
    return prefix


def network_bounds(network_id: int) -> tuple[bytes, bytes]:
    """[lo, hi) holding every eventId of the network (varints are prefix-free)."""
    head = _head(network_id)
    return head, prefix_successor(head)


def channel_bounds(network_id: int, channel: str) -> tuple[bytes, bytes]:
    """[lo, hi) holding every event of one channel (and, rarely, of an 8-byte hash twin)."""
    prefix = stream_prefix(network_id, channel)
    return prefix, prefix_successor(prefix)


def sender_bounds(network_id: int, channel: str, sender: str) -> tuple[bytes, bytes]:
    """[lo, hi) holding every event of one sender in one channel."""
    prefix = stream_prefix(network_id, channel, sender)
    return prefix, prefix_successor(prefix)
