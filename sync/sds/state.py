"""The persisted state of an ``SdsChannel`` (clock, buffers, repair buffers), as a public type.

:class:`ChannelState` is what ``SdsChannel.snapshot()`` returns and ``SdsChannel.restore``
applies; this module only turns it into bytes and back, and knows nothing of the channel.
The bytes are version 2: ``STATE_MAGIC`` then a protobuf ``ChannelStateV2`` (``sds_state.proto``).
Our own unacknowledged messages are saved by reference (message id, no wire): the node's log
holds their wires and gives them back to ``restore``. Version 1 was a JSON object (bytes as
base64, ``"v": 1``) holding every wire; ``decode_state`` still reads it (saved state from before
the upgrade), and the next save writes version 2. The log itself is not in either: the node
persists the log and passes it back to ``restore``, which rebuilds the delivered set, the history
tail and the bloom filter from it. A malformed state raises ``RemoteProtocolError`` like any
other bad input.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from sync.errors import RemoteProtocolError
from sync.sds.message import HistoryRef
from sync.sds.sds_state_pb2 import ChannelStateV2, StateRef

__all__ = [
    "MAX_STATE_SIZE",
    "ChannelState",
    "LogEntry",
    "MissingState",
    "OutgoingState",
    "WaitingState",
    "decode_state",
    "encode_state",
]

MAX_STATE_SIZE = 256 << 20
#: Version 2 (binary) starts with these bytes; version 1 (JSON) starts with ``{``.
STATE_MAGIC = b"\x00SDS\x02"
#: (message_id, lamport) or (message_id, lamport, sender_id) of a delivered message.
LogEntry = tuple[str, int] | tuple[str, int, str]


@dataclass(frozen=True, slots=True)
class OutgoingState:
    """One of our messages not yet acknowledged; ``resend_at`` None = one resend period on.
    ``wire`` is None in a version-2 state (the message is saved by reference, ``message_id``);
    a version-1 state carried the wire (and no id: it is the wire's)."""

    message_id: str
    wire: bytes | None
    attempts: int
    possibly: bool
    bloom_senders: frozenset[str]
    fp_product: float
    resend_at: float | None


@dataclass(frozen=True, slots=True)
class WaitingState:
    """A received message waiting for its dependencies."""

    wire: bytes
    lost: bool


@dataclass(frozen=True, slots=True)
class MissingState:
    """A dependency we wait for; ``lost_at`` None = one ``lost_timeout`` on."""

    ref: HistoryRef
    lost_at: float | None


@dataclass(frozen=True, slots=True)
class ChannelState:
    """Everything of a channel that is not rebuilt from the log."""

    channel_id: str
    participant_id: str
    lamport: int
    last_activity: float
    outgoing: tuple[OutgoingState, ...]
    waiting: tuple[WaitingState, ...]
    missing: tuple[MissingState, ...]
    lost: tuple[str, ...]
    repair_out: tuple[tuple[HistoryRef, float], ...]  # (what, when to request it)
    repair_in: tuple[tuple[str, float], ...]  # (message id, when to answer)
    heads: tuple[HistoryRef, ...]
    sync_at: float | None


def _unb64(text: Any) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError("expected base64 text")
    return base64.b64decode(text, validate=True)


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("non-finite number")
    return number


def _maybe_finite(value: Any) -> float | None:
    return None if value is None else _finite(value)


def _ref(obj: Any) -> HistoryRef:
    mid, sender = obj["id"], obj["sender"]
    if not isinstance(mid, str) or not (sender is None or isinstance(sender, str)):
        raise ValueError("bad history entry")
    return HistoryRef(mid, _unb64(obj["hint"]), sender)


def _ref_pb(ref: HistoryRef, out: StateRef) -> None:
    out.message_id = ref.message_id
    if ref.retrieval_hint is not None:
        out.retrieval_hint = ref.retrieval_hint
    if ref.sender_id is not None:
        out.sender_id = ref.sender_id


def _ref_of_pb(ref: StateRef) -> HistoryRef:
    return HistoryRef(ref.message_id,
                      ref.retrieval_hint if ref.HasField("retrieval_hint") else None,
                      ref.sender_id if ref.HasField("sender_id") else None)


def encode_state(state: ChannelState) -> bytes:
    """Version 2: outgoing messages by id only (``OutgoingState.wire`` is not written)."""
    pb = ChannelStateV2(channel_id=state.channel_id, participant_id=state.participant_id,
                        lamport=state.lamport, last_activity=state.last_activity,
                        lost=sorted(state.lost))
    for e in state.outgoing:
        out = pb.outgoing.add(message_id=e.message_id, attempts=e.attempts, possibly=e.possibly,
                              bloom_senders=sorted(e.bloom_senders), fp_product=e.fp_product)
        if e.resend_at is not None:
            out.resend_at = e.resend_at
    for w in state.waiting:
        pb.waiting.add(wire=w.wire, lost=w.lost)
    for m in state.missing:
        item = pb.missing.add()
        _ref_pb(m.ref, item.ref)
        if m.lost_at is not None:
            item.lost_at = m.lost_at
    for ref, when in state.repair_out:
        timed = pb.repair_out.add(at=when)
        _ref_pb(ref, timed.ref)
    for mid, when in state.repair_in:
        pb.repair_in.add(message_id=mid, at=when)
    for ref in state.heads:
        _ref_pb(ref, pb.heads.add())
    if state.sync_at is not None:
        pb.sync_at = state.sync_at
    return STATE_MAGIC + pb.SerializeToString(deterministic=True)


def decode_state(data: bytes, max_size: int = MAX_STATE_SIZE) -> ChannelState:
    """Version 2 (binary), or version 1 (JSON, saved before the upgrade).

    :raises RemoteProtocolError: too large, of no known version, or malformed."""
    if len(data) > max_size:
        raise RemoteProtocolError("channel state too large")
    try:
        if data.startswith(STATE_MAGIC):
            return _state_of_pb(data[len(STATE_MAGIC):])
        obj = json.loads(data)
        if not isinstance(obj, dict) or obj.get("v") != 1:
            raise ValueError("unknown state version")
        return _state_of(obj)
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        OverflowError,
        RecursionError,
        DecodeError,
    ) as exc:  # binascii.Error, JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RemoteProtocolError(f"bad channel state: {exc}") from None


def _maybe(pb: Any, name: str) -> float | None:
    return _finite(getattr(pb, name)) if pb.HasField(name) else None


def _state_of_pb(data: bytes) -> ChannelState:
    pb = ChannelStateV2()
    pb.ParseFromString(data)
    return ChannelState(
        channel_id=pb.channel_id,
        participant_id=pb.participant_id,
        lamport=pb.lamport,
        last_activity=_finite(pb.last_activity),
        outgoing=tuple(
            OutgoingState(e.message_id, None, e.attempts, e.possibly,
                          frozenset(e.bloom_senders), _finite(e.fp_product),
                          _maybe(e, "resend_at"))
            for e in pb.outgoing),
        waiting=tuple(WaitingState(w.wire, w.lost) for w in pb.waiting),
        missing=tuple(MissingState(_ref_of_pb(m.ref), _maybe(m, "lost_at"))
                      for m in pb.missing),
        lost=tuple(pb.lost),
        repair_out=tuple((_ref_of_pb(t.ref), _finite(t.at)) for t in pb.repair_out),
        repair_in=tuple((r.message_id, _finite(r.at)) for r in pb.repair_in),
        heads=tuple(_ref_of_pb(ref) for ref in pb.heads),
        sync_at=_maybe(pb, "sync_at"),
    )


def _state_of(obj: dict[str, Any]) -> ChannelState:
    """A version-1 (JSON) state: read for migration only, never written."""
    lamport = int(obj["lamport"])
    if not 0 <= lamport < 1 << 64:
        raise ValueError("lamport out of range")
    return ChannelState(
        channel_id=str(obj["channel_id"]),
        participant_id=str(obj["participant_id"]),
        lamport=lamport,
        last_activity=_finite(obj["last_activity"]),
        outgoing=tuple(
            OutgoingState(
                message_id="",
                wire=_unb64(item["wire"]) or b"",
                attempts=int(item["attempts"]),
                possibly=bool(item["possibly"]),
                bloom_senders=frozenset(str(s) for s in item["bloom_senders"]),
                fp_product=_finite(item["fp_product"]),
                resend_at=_maybe_finite(item["resend_at"]),
            )
            for item in obj["outgoing"]
        ),
        waiting=tuple(
            WaitingState(_unb64(item["wire"]) or b"", bool(item["lost"]))
            for item in obj["waiting"]
        ),
        missing=tuple(
            MissingState(_ref(item["ref"]), _maybe_finite(item["lost_at"]))
            for item in obj["missing"]
        ),
        lost=tuple(str(mid) for mid in obj["lost"]),
        repair_out=tuple((_ref(item["ref"]), _finite(item["t_req"])) for item in obj["repair_out"]),
        repair_in=tuple((str(item["id"]), _finite(item["t_resp"])) for item in obj["repair_in"]),
        heads=tuple(_ref(ref_obj) for ref_obj in obj["heads"]),
        sync_at=_maybe_finite(obj["sync_at"]),
    )
