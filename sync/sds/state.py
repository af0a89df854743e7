"""The persisted state of an ``SdsChannel`` (clock, buffers, repair buffers), as a public type.

:class:`ChannelState` is what ``SdsChannel.snapshot()`` returns and ``SdsChannel.restore``
applies; this module only turns it into bytes and back, and knows nothing of the channel.
The bytes are a JSON object (UTF-8, bytes as base64, version ``"v": 1``). The log itself is not
in it: the node persists the log and passes it back to ``restore``, which rebuilds the delivered
set, the history tail and the bloom filter from it. A malformed state raises
``RemoteProtocolError`` like any other bad input.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import Any

from sync.errors import RemoteProtocolError
from sync.sds.message import HistoryRef

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
STATE_VERSION = 1
#: (message_id, lamport) or (message_id, lamport, sender_id) of a delivered message.
LogEntry = tuple[str, int] | tuple[str, int, str]


@dataclass(frozen=True, slots=True)
class OutgoingState:
    """One of our messages not yet acknowledged; ``resend_at`` None = one resend period on."""

    wire: bytes
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


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


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


def _ref_json(ref: HistoryRef) -> dict[str, Any]:
    return {"id": ref.message_id, "hint": _b64(ref.retrieval_hint), "sender": ref.sender_id}


def _ref(obj: Any) -> HistoryRef:
    mid, sender = obj["id"], obj["sender"]
    if not isinstance(mid, str) or not (sender is None or isinstance(sender, str)):
        raise ValueError("bad history entry")
    return HistoryRef(mid, _unb64(obj["hint"]), sender)


def encode_state(state: ChannelState) -> bytes:
    obj = {
        "v": STATE_VERSION,
        "channel_id": state.channel_id,
        "participant_id": state.participant_id,
        "lamport": state.lamport,
        "last_activity": state.last_activity,
        "outgoing": [
            {
                "wire": _b64(e.wire),
                "attempts": e.attempts,
                "possibly": e.possibly,
                "bloom_senders": sorted(e.bloom_senders),
                "fp_product": e.fp_product,
                "resend_at": e.resend_at,
            }
            for e in state.outgoing
        ],
        "waiting": [{"wire": _b64(w.wire), "lost": w.lost} for w in state.waiting],
        "missing": [{"ref": _ref_json(m.ref), "lost_at": m.lost_at} for m in state.missing],
        "lost": sorted(state.lost),
        "repair_out": [{"ref": _ref_json(ref), "t_req": when} for ref, when in state.repair_out],
        "repair_in": [{"id": mid, "t_resp": when} for mid, when in state.repair_in],
        "heads": [_ref_json(ref) for ref in state.heads],
        "sync_at": state.sync_at,
    }
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def decode_state(data: bytes, max_size: int = MAX_STATE_SIZE) -> ChannelState:
    """:raises RemoteProtocolError: too large, not a version-1 state, or malformed."""
    if len(data) > max_size:
        raise RemoteProtocolError("channel state too large")
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict) or obj.get("v") != STATE_VERSION:
            raise ValueError("unknown state version")
        return _state_of(obj)
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        OverflowError,
        RecursionError,
    ) as exc:  # binascii.Error and JSONDecodeError are ValueErrors
        raise RemoteProtocolError(f"bad channel state: {exc}") from None


def _state_of(obj: dict[str, Any]) -> ChannelState:
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
