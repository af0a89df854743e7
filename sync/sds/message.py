"""The SDS event model: identity digest, signature, canonical wire, decoding with limits.

An *event* is the signed, stable part of an SDS ``Message``: channel, sender, lamport timestamp,
causal history, content, message id and signature. Its *canonical wire* is that ``Message``
serialised deterministically without the per-transmission fields (bloom filter and its
parameters, repair requests) and without unknown fields; it is what a node stores and relays,
and it is itself a valid SDS message. A *transmission* is a canonical wire followed by the
serialised per-transmission fields (protobuf merges concatenated messages), so a resend re-uses
the signed bytes and only re-encodes the filter.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.errors import ErrorKind, RemoteProtocolError
from sync.identity import verify
from sync.sds import sds_pb2
from sync.sds.bloom import BloomParams

__all__ = [
    "DEFAULT_MAX_SIZE",
    "SIGNATURE_DOMAIN",
    "DecodeLimits",
    "HistoryRef",
    "SignedEvent",
    "Transmission",
    "decode_event",
    "decode_transmission",
    "encode_event",
    "event_digest",
    "filter_signed_bytes",
    "message_id_of",
    "repair_signed_bytes",
    "transmission_suffix",
    "verify_filter",
    "verify_repair",
    "without_signature",
]

DEFAULT_MAX_SIZE = 1 << 20
#: Prefix of the signed bytes, so an SDS signature can never be replayed as another protocol's.
SIGNATURE_DOMAIN = b"syncnode/sds/v1/event:"
_DIGEST_DOMAIN = b"syncnode/sds/v1\x00"
#: Prefix of a bloom filter's signed bytes (never valid as an event's: another domain).
FILTER_DOMAIN = b"syncnode/sds/v1/filter:"
REPAIR_DOMAIN = b"syncnode/sds/v1/repair:"
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class HistoryRef(NamedTuple):
    """A ``HistoryEntry``: a message id with its optional retrieval hint and (SDS-R) sender.

    (A named tuple rather than a dataclass: several are built per received message.)
    """

    message_id: str
    retrieval_hint: bytes | None = None
    sender_id: str | None = None


@dataclass(frozen=True)
class DecodeLimits:
    max_size: int = DEFAULT_MAX_SIZE
    max_history_entries: int = 64
    max_repair_entries: int = 32
    max_id_length: int = 256
    max_hint_length: int = 1024


#: A message's sender and channel are stored in columns of this many characters
#: (``storage.schema.events``): a longer one is refused here, where it is counted as a bad
#: message, rather than by the database after the channel accepted it.
MAX_STORED_ID_LENGTH = 128


class SignedEvent(NamedTuple):
    """The stable, signed part of a message. ``lamport is None`` marks an ephemeral message,
    empty ``content`` a sync message. (A named tuple: one is built per received message.)"""

    channel_id: str
    sender_id: str
    message_id: str
    lamport: int | None
    causal_history: tuple[HistoryRef, ...]
    content: bytes
    signature: bytes | None
    wire: bytes

    @property
    def history_ids(self) -> tuple[str, ...]:
        return tuple([h.message_id for h in self.causal_history])  # (a list: faster)

    @property
    def is_ephemeral(self) -> bool:
        return self.lamport is None

    @property
    def is_sync(self) -> bool:
        return self.lamport is not None and not self.content


class Transmission(NamedTuple):
    """A decoded message: the event plus what its sender attached to this one transmission.
    ``bloom_params`` is ``None`` when the sender did not say how to read its filter. (A named
    tuple: one is built per received message, and a frozen dataclass's ``__init__`` cost
    about a microsecond more.)"""

    event: SignedEvent
    bloom_filter: bytes | None
    bloom_params: BloomParams | None
    repair_request: tuple[HistoryRef, ...]
    #: The sender's signature over the filter (``filter_signed_bytes``), if it signed it.
    bloom_signature: bytes | None = None
    #: The sender's signature over its repair requests (``repair_signed_bytes``), if any.
    repair_signature: bytes | None = None


def event_digest(
    channel_id: str,
    sender_id: str,
    lamport: int | None,
    history_ids: tuple[str, ...] | list[str],
    content: bytes,
) -> bytes:
    """sha256 over the canonical encoding of the stable fields (see docs/sds.md)."""
    pack = _U32.pack
    channel = channel_id.encode()
    sender = sender_id.encode()
    parts = [_DIGEST_DOMAIN, pack(len(channel)), channel, pack(len(sender)), sender]
    parts.append(b"\x00" if lamport is None else b"\x01" + _U64.pack(lamport))
    parts.append(pack(len(history_ids)))
    for i in history_ids:
        raw = i.encode()
        parts.append(pack(len(raw)))
        parts.append(raw)
    parts.append(pack(len(content)))
    parts.append(content)
    return hashlib.sha256(b"".join(parts)).digest()


def message_id_of(
    channel_id: str,
    sender_id: str,
    lamport: int | None,
    history_ids: tuple[str, ...] | list[str],
    content: bytes,
) -> str:
    """The message id: lower-case hex of :func:`event_digest`."""
    return event_digest(channel_id, sender_id, lamport, history_ids, content).hex()


def _entry_pb(ref: HistoryRef) -> sds_pb2.HistoryEntry:
    entry = sds_pb2.HistoryEntry(message_id=ref.message_id)
    if ref.retrieval_hint is not None:
        entry.retrieval_hint = ref.retrieval_hint
    if ref.sender_id is not None:
        entry.sender_id = ref.sender_id
    return entry


def encode_event(
    channel_id: str,
    sender_id: str,
    lamport: int | None,
    causal_history: tuple[HistoryRef, ...],
    content: bytes,
    signing_key: Ed25519PrivateKey | None,
    *,
    message_id: str | None = None,
) -> SignedEvent:
    """Build, identify and sign an event; the caller checked that ``sender_id`` is the key's.

    ``message_id``: an id of another profile's rule (``sync.sds.profile``); such an event is
    never signed (our signature covers our digest only)."""
    if message_id is not None:
        if signing_key is not None:
            raise ValueError("an event with a foreign message id is not signed")
        digest = b""
    else:
        ids = tuple(h.message_id for h in causal_history)
        digest = event_digest(channel_id, sender_id, lamport, ids, content)
        message_id = digest.hex()
    msg = sds_pb2.Message(sender_id=sender_id, message_id=message_id, channel_id=channel_id)
    if lamport is not None:
        msg.lamport_timestamp = lamport
    msg.causal_history.extend(_entry_pb(h) for h in causal_history)
    if content:
        msg.content = content
    signature = None
    if signing_key is not None:
        signature = signing_key.sign(SIGNATURE_DOMAIN + digest)
        msg.signature = signature
    return SignedEvent(
        channel_id=channel_id,
        sender_id=sender_id,
        message_id=message_id,
        lamport=lamport,
        causal_history=causal_history,
        content=content,
        signature=signature,
        wire=msg.SerializeToString(deterministic=True),
    )


def filter_signed_bytes(channel_id: str, params: BloomParams, bloom: bytes) -> bytes:
    """What a sender signs for its bloom filter: the filter is evidence of *its* receipts in
    *this* channel, so both are bound (the message id is not: the same filter may travel with
    any of the sender's messages)."""
    channel = channel_id.encode()
    return b"".join((FILTER_DOMAIN, _U32.pack(len(channel)), channel, _U32.pack(params.bits),
                     _U32.pack(params.hashes), bloom))


def verify_filter(sender_id: str, channel_id: str, params: BloomParams, bloom: bytes,
                  signature: bytes | None) -> bool:
    """Whether ``sender_id`` signed this filter (False for an unsigned one)."""
    if signature is None:
        return False
    return verify(sender_id, signature, filter_signed_bytes(channel_id, params, bloom))


def repair_signed_bytes(channel_id: str, message_id: str,
                        repair_request: tuple[HistoryRef, ...]) -> bytes:
    """What a sender signs for the repair requests of one transmission: bound to the channel
    and to the message that carries them, so that they cannot be attached to anyone else's
    message (a replay of the whole transmission repeats the same requester's request, which
    ``sync.sds.repair_budget`` charges once)."""
    parts = [REPAIR_DOMAIN]
    for text in (channel_id, message_id):
        raw = text.encode()
        parts += (_U32.pack(len(raw)), raw)
    parts.append(_U32.pack(len(repair_request)))
    for ref in repair_request:
        raw = ref.message_id.encode()
        parts += (_U32.pack(len(raw)), raw)
    return b"".join(parts)


def verify_repair(sender_id: str, channel_id: str, message_id: str,
                  repair_request: tuple[HistoryRef, ...], signature: bytes | None) -> bool:
    """Whether ``sender_id`` signed these repair requests on this message."""
    if signature is None:
        return False
    return verify(sender_id, signature,
                  repair_signed_bytes(channel_id, message_id, repair_request))


def transmission_suffix(
    bloom: bytes | None, params: BloomParams | None, repair_request: tuple[HistoryRef, ...],
    *, announce_params: bool = True, channel_id: str = "",
    signing_key: Ed25519PrivateKey | None = None, message_id: str = "",
) -> bytes:
    """The per-transmission fields, serialised on their own, to append to a canonical wire.
    With ``signing_key`` the filter and the repair requests are signed (``filter_signed_bytes``,
    ``repair_signed_bytes`` with ``message_id``, the carrying message's); without
    ``announce_params`` the filter goes alone (a fixed-shape filter, as @waku/sds's)."""
    msg = sds_pb2.Message()
    if bloom is not None and params is not None:
        msg.bloom_filter = bloom
        if announce_params:
            msg.bloom_bits = params.bits
            msg.bloom_hashes = params.hashes
        if signing_key is not None:
            msg.bloom_signature = signing_key.sign(filter_signed_bytes(channel_id, params, bloom))
    msg.repair_request.extend(_entry_pb(h) for h in repair_request)
    if repair_request and signing_key is not None:
        msg.repair_signature = signing_key.sign(
            repair_signed_bytes(channel_id, message_id, repair_request))
    return msg.SerializeToString(deterministic=True)


def without_signature(event: SignedEvent) -> SignedEvent:
    """The event with its signature field dropped from the record and the canonical wire."""
    msg = sds_pb2.Message()
    msg.ParseFromString(event.wire)
    msg.ClearField("signature")
    return event._replace(signature=None, wire=msg.SerializeToString(deterministic=True))


# The named tuples built without their Python-level ``__new__`` (every field given here; the
# receive path builds several per message): ``_tuple_new(HistoryRef, (...))``.
_tuple_new = tuple.__new__


def _refs(entries: Any, limit: int, limits: DecodeLimits, what: str) -> tuple[HistoryRef, ...]:
    if not entries:
        return ()
    if len(entries) > limit:
        raise RemoteProtocolError(f"too many {what} entries", kind=ErrorKind.MALFORMED_EVENT)
    max_id = limits.max_id_length
    out = []
    for e in entries:
        mid = e.message_id
        if not mid or len(mid) > max_id:
            raise RemoteProtocolError(f"{what} entry has a bad message id",
                                      kind=ErrorKind.MALFORMED_EVENT)
        # Empty and absent are the same: no hint, no sender (saves two presence checks).
        hint = e.retrieval_hint or None
        if hint is not None and len(hint) > limits.max_hint_length:
            raise RemoteProtocolError(f"{what} retrieval hint too long",
                                      kind=ErrorKind.MALFORMED_EVENT)
        sender = e.sender_id or None
        if sender is not None and len(sender) > max_id:
            raise RemoteProtocolError(f"{what} sender id too long",
                                      kind=ErrorKind.MALFORMED_EVENT)
        out.append(_tuple_new(HistoryRef, (mid, hint, sender)))
    return tuple(out)


def _verify(sender_id: str, signature: bytes, digest: bytes) -> None:
    """Ed25519 verification (libsodium, see ``sync.identity.verify``): the receive path's
    dominant cost."""
    if not verify(sender_id, signature, SIGNATURE_DOMAIN + digest):
        raise RemoteProtocolError("bad signature", kind=ErrorKind.BAD_SIGNATURE)


def _decode(
    data: bytes,
    limits: DecodeLimits,
    check_id: bool,
    verify_signature: bool,
    known_signatures: Mapping[str, bytes] | None,
) -> Transmission:
    if len(data) > limits.max_size:
        raise RemoteProtocolError("message too large", kind=ErrorKind.TOO_LARGE)
    msg = sds_pb2.Message()
    try:
        msg.ParseFromString(data)
    except Exception as exc:  # the C decoder's error types vary; all mean "bad bytes"
        raise RemoteProtocolError(f"undecodable message: {type(exc).__name__}",
                                  kind=ErrorKind.UNDECODABLE) from None
    sender, mid, channel = msg.sender_id, msg.message_id, msg.channel_id
    max_id = limits.max_id_length
    if not sender:
        raise RemoteProtocolError("missing sender id", kind=ErrorKind.MALFORMED_EVENT)
    if len(sender) > min(max_id, MAX_STORED_ID_LENGTH):
        raise RemoteProtocolError(
            f"sender id longer than {min(max_id, MAX_STORED_ID_LENGTH)} characters",
            kind=ErrorKind.MALFORMED_EVENT)
    if not mid or len(mid) > max_id:
        raise RemoteProtocolError("missing or oversized message id",
                                  kind=ErrorKind.MALFORMED_EVENT)
    if len(channel) > min(max_id, MAX_STORED_ID_LENGTH):
        raise RemoteProtocolError(
            f"channel id longer than {min(max_id, MAX_STORED_ID_LENGTH)} characters",
            kind=ErrorKind.MALFORMED_EVENT)
    lamport = msg.lamport_timestamp if msg.HasField("lamport_timestamp") else None
    content = msg.content
    if lamport is None and not content:
        raise RemoteProtocolError("message has neither lamport timestamp nor content",
                                  kind=ErrorKind.MALFORMED_EVENT)
    history = _refs(msg.causal_history, limits.max_history_entries, limits, "causal history")
    repair = _refs(msg.repair_request, limits.max_repair_entries, limits, "repair request")
    # The per-transmission fields are read, then cleared only where present (what is left is
    # the canonical wire, below): clearing an absent one cost as much as reading it.
    has, clear = msg.HasField, msg.ClearField
    bloom = msg.bloom_filter if has("bloom_filter") else None
    bits = msg.bloom_bits if has("bloom_bits") else None
    hashes = msg.bloom_hashes if has("bloom_hashes") else None
    bloom_signature = msg.bloom_signature if has("bloom_signature") else None
    repair_signature = msg.repair_signature if has("repair_signature") else None
    params = None
    if bloom is not None and bits is not None and hashes is not None:
        params = _tuple_new(BloomParams, (bits, hashes))
    for name, value in (("bloom_filter", bloom), ("bloom_bits", bits), ("bloom_hashes", hashes),
                        ("bloom_signature", bloom_signature),
                        ("repair_signature", repair_signature),
                        ("repair_request", repair or None)):
        if value is not None:  # (present, even if empty: b"" or 0 must go too)
            clear(name)
    signature = msg.signature if has("signature") else None
    if check_id or verify_signature:
        ids = [h.message_id for h in history]
        digest = event_digest(channel, sender, lamport, ids, content)
        if digest.hex() != mid:
            raise RemoteProtocolError("message id does not match the message",
                                      kind=ErrorKind.BAD_ID)
        if verify_signature:
            if signature is None:
                raise RemoteProtocolError("message is not signed", kind=ErrorKind.UNSIGNED)
            known = known_signatures.get(mid) if known_signatures else None
            if known is None or signature != known:
                _verify(sender, signature, digest)
    # The canonical wire: the same message without per-transmission (cleared above) and
    # unknown fields.
    msg.DiscardUnknownFields()
    if not content and has("content"):
        clear("content")
    event = _tuple_new(SignedEvent, (
        channel,
        sender,
        mid,
        lamport,
        history,
        content,
        signature,
        msg.SerializeToString(deterministic=True),
    ))
    return _tuple_new(Transmission,
                      (event, bloom, params, repair, bloom_signature, repair_signature))


def decode_transmission(
    data: bytes,
    limits: DecodeLimits = DecodeLimits(),
    *,
    check_id: bool = True,
    verify_signature: bool = True,
    known_signatures: Mapping[str, bytes] | None = None,
) -> Transmission:
    """Decode a received message; ``RemoteProtocolError`` on anything invalid.

    ``known_signatures``: message id -> signature already verified (skips the costly Ed25519
    check for a duplicate carrying the same signature).
    """
    return _decode(data, limits, check_id, verify_signature, known_signatures)


def decode_event(
    wire: bytes, *, max_size: int = DEFAULT_MAX_SIZE, verify_signature: bool = True
) -> SignedEvent:
    """Parse a stored or fetched event and check its id and signature.

    Per-transmission fields, if present, are ignored; ``.wire`` of the result is canonical.
    """
    return _decode(wire, DecodeLimits(max_size=max_size), True, verify_signature, None).event
