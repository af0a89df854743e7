"""Export and restore of an ``SdsChannel``'s state (clock, buffers, repair buffers).

The state is a JSON object (UTF-8, bytes as base64, version ``"v": 1``). The log itself is not
in it: the node persists the log, and passes it back to ``restore``, which rebuilds the delivered
set, the history tail and the bloom filter (the most recent ``bloom_capacity`` ids) from it.
A malformed state raises ``RemoteProtocolError`` like any other bad input.
"""

from __future__ import annotations

import base64
import json
import math
import random
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.errors import RemoteProtocolError
from sync.sds.buffers import OutgoingEntry
from sync.sds.clock import LAMPORT_MAX, recovered_clock
from sync.sds.config import SdsConfig
from sync.sds.delivered import DeliveredLookup
from sync.sds.message import HistoryRef, decode_event
from sync.sds.timers import TimerKind

if TYPE_CHECKING:
    from sync.sds.channel import SdsChannel

__all__ = ["MAX_STATE_SIZE", "LogEntry", "export_state", "restore_channel"]

MAX_STATE_SIZE = 256 << 20
STATE_VERSION = 1
#: (message_id, lamport) or (message_id, lamport, sender_id) of a delivered message.
LogEntry = tuple[str, int] | tuple[str, int, str]


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


def _ref_json(ref: HistoryRef) -> dict[str, Any]:
    return {"id": ref.message_id, "hint": _b64(ref.retrieval_hint), "sender": ref.sender_id}


def _ref(obj: Any) -> HistoryRef:
    mid, sender = obj["id"], obj["sender"]
    if not isinstance(mid, str) or not (sender is None or isinstance(sender, str)):
        raise ValueError("bad history entry")
    return HistoryRef(mid, _unb64(obj["hint"]), sender)


def _waiting_json(ch: SdsChannel) -> list[dict[str, Any]]:
    """The newest waiting messages, up to ``waiting_state_bytes``: the state is saved every few
    seconds, and a full waiting buffer (``max_waiting_bytes``) would cost that much again in
    base64 each time. Those left out are not in any log yet; after a restart they come again
    like any message we do not have (a resend, a repair, Recon)."""
    budget = ch.config.waiting_state_bytes
    out: list[dict[str, Any]] = []
    for w in reversed(ch._waiting.values()):
        budget -= len(w.event.wire)
        if budget < 0:
            break
        out.append({"wire": _b64(w.event.wire), "lost": w.lost_dependency})
    out.reverse()
    return out


def export_state(ch: SdsChannel) -> bytes:
    timers = ch._timers
    state = {
        "v": STATE_VERSION,
        "channel_id": ch.channel_id,
        "participant_id": ch.participant_id,
        "lamport": ch._lamport,
        "last_activity": ch._last_activity,
        "outgoing": [
            {
                "wire": _b64(e.wire),
                "attempts": e.attempts,
                "possibly": e.possibly,
                "bloom_senders": sorted(e.bloom_senders),
                "fp_product": e.fp_product,
                "resend_at": timers.due(TimerKind.RESEND, e.message_id),
            }
            for e in ch._outgoing.values()
        ],
        "waiting": _waiting_json(ch),
        "missing": [
            {"ref": _ref_json(ref), "lost_at": timers.due(TimerKind.LOST, mid)}
            for mid, ref in ch._missing.items()
        ],
        "lost": sorted(ch._lost),
        "repair_out": [
            {"ref": _ref_json(ref), "t_req": when} for when, ref in ch._repair.requests.values()
        ],
        "repair_in": [{"id": mid, "t_resp": when} for mid, when in ch._repair.responses.items()],
        "heads": [_ref_json(ref) for ref in ch._heads.values()],
        "sync_at": timers.due(TimerKind.SYNC, ""),
    }
    return json.dumps(state, separators=(",", ":"), sort_keys=True).encode()


def restore_channel(
    cls: type[SdsChannel],
    state: bytes,
    signing_key: Ed25519PrivateKey | None,
    *,
    log: Iterable[LogEntry],
    cached_wires: Iterable[bytes],
    config: SdsConfig | None,
    rng: random.Random | None,
    now: float,
    verify_signatures: bool,
    lookup: DeliveredLookup | None = None,
    log_truncated: bool = False,
    max_size: int = MAX_STATE_SIZE,
) -> SdsChannel:
    if len(state) > max_size:
        raise RemoteProtocolError("channel state too large")
    try:
        obj = json.loads(state)
        if not isinstance(obj, dict) or obj.get("v") != STATE_VERSION:
            raise ValueError("unknown state version")
        ch = cls(
            str(obj["channel_id"]),
            str(obj["participant_id"]),
            signing_key,
            config=config,
            rng=rng,
            now=now,
            verify_signatures=verify_signatures,
            lookup=lookup,
        )
        _load_log(ch, log, truncated=log_truncated)
        _load_buffers(ch, obj, now)
        for wire in cached_wires:
            event = decode_event(wire, max_size=ch.config.max_message_size, verify_signature=False)
            if ch._log.in_memory(event.message_id):
                ch._repair.remember(event.message_id, event.sender_id, event.wire)
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        OverflowError,
        RecursionError,
    ) as exc:  # binascii.Error and JSONDecodeError are ValueErrors
        raise RemoteProtocolError(f"bad channel state: {exc}") from None
    return ch


def _load_log(ch: SdsChannel, log: Iterable[LogEntry], *, truncated: bool) -> None:
    entries: list[tuple[int, str, str | None]] = []
    for item in log:
        mid, lamport = item[0], item[1]
        sender = item[2] if len(item) > 2 else None
        if not isinstance(mid, str) or not isinstance(lamport, int) or lamport < 0:
            raise ValueError("bad log entry")
        entries.append((lamport, mid, sender))
    entries.sort()
    ch._log.load([(lamport, mid) for lamport, mid, _ in entries], truncated=truncated)
    for lamport, mid, sender in entries[-ch._tail_size :]:
        ch._tail.append((lamport, mid))
        ch._tail_refs[mid] = HistoryRef(mid, None, sender)
    for _, mid, _ in entries[-ch._bloom.window :]:
        ch._bloom.add(mid)


def _load_buffers(ch: SdsChannel, obj: dict[str, Any], now: float) -> None:
    timers = ch._timers
    cfg = ch.config
    lamport = int(obj["lamport"])
    if not 0 <= lamport < 1 << 64:
        raise ValueError("lamport out of range")
    # A clock persisted before the clock rule (or raised by a log entry accepted before it)
    # may be out of range: start from the largest value the rule accepts now instead.
    ch._lamport, ch.clock_recovered = recovered_clock(
        [lamport, *(lam for _, lam in ch._log.items())], now, cfg.max_lamport_ahead_ms
    )
    ch._last_activity = _finite(obj["last_activity"])
    heads = [_ref(ref_obj) for ref_obj in obj["heads"]]
    delivered = ch._log.known(ref.message_id for ref in heads)
    for ref in heads:
        if ref.message_id in delivered:
            ch._heads[ref.message_id] = ref
            known_lamport = ch._log.lamport(ref.message_id)
            ch._head_lamport[ref.message_id] = -1 if known_lamport is None else known_lamport
    if not ch._heads and ch._tail:
        lamport_of_tail, mid = ch._tail[-1]
        ch._heads[mid] = ch._tail_refs[mid]
        ch._head_lamport[mid] = lamport_of_tail
    lost = [str(mid) for mid in obj["lost"]]
    delivered = ch._log.known(lost)
    ch._lost.update(mid for mid in lost if mid not in delivered)
    for item in obj["outgoing"]:
        wire = _unb64(item["wire"]) or b""
        event = decode_event(wire, max_size=cfg.max_message_size, verify_signature=False)
        entry = OutgoingEntry(
            event.message_id,
            event.wire,
            attempts=int(item["attempts"]),
            possibly=bool(item["possibly"]),
            bloom_senders={str(s) for s in item["bloom_senders"]},
            fp_product=_finite(item["fp_product"]),
        )
        ch._outgoing[entry.message_id] = entry
        ch._repair.remember(entry.message_id, event.sender_id, event.wire)
        resend_at = item["resend_at"]
        when = _finite(resend_at) if resend_at is not None else now + cfg.resend_interval
        timers.schedule(TimerKind.RESEND, entry.message_id, when)
    missing = [(_ref(item["ref"]), item) for item in obj["missing"]]
    delivered = ch._log.known(ref.message_id for ref, _ in missing)
    for ref, item in missing:
        if ref.message_id in delivered:
            continue  # fetched by other means (e.g. Recon) while we were down
        for old in ch._missing_quota.add(ref.message_id, ref.sender_id or "", 1):
            ch._evict_missing(old)
        ch._missing[ref.message_id] = ref
        lost_at = item["lost_at"]
        when = _finite(lost_at) if lost_at is not None else now + cfg.lost_timeout
        timers.schedule(TimerKind.LOST, ref.message_id, when)
    for item in obj["waiting"]:
        event = decode_event(
            _unb64(item["wire"]) or b"", max_size=cfg.max_message_size, verify_signature=False
        )
        if event.lamport is None or event.lamport > LAMPORT_MAX:
            continue
        delivered = ch._log.known([event.message_id, *event.history_ids])
        if event.message_id in delivered:
            continue
        unmet = {h for h in event.history_ids if h not in delivered and h not in ch._lost}
        ch._wait(event, unmet, bool(item["lost"]))
    ready = [w for w in ch._waiting.values() if not w.missing]
    for w in ready:
        ch._unwait(w.event.message_id)
        ch._deliver(w.event, lost_dependency=w.lost_dependency)
    unknown = {d for d in ch._waiters if d not in ch._missing and d not in ch._waiting}
    ch._note_missing([HistoryRef(d) for d in sorted(unknown)], now, charged_to="")
    for item in obj["repair_out"]:
        ref = _ref(item["ref"])
        if ch._log.contains(ref.message_id):
            continue
        ch._repair.want(ref, now, at=_finite(item["t_req"]))
    for item in obj["repair_in"]:
        mid, when = str(item["id"]), _finite(item["t_resp"])
        ch._repair.responses[mid] = when
        timers.schedule(TimerKind.REPAIR_RESPONSE, mid, when)
    sync_at = obj["sync_at"]
    if sync_at is not None:
        ch._sync_armed_at = ch._last_activity
        timers.schedule(TimerKind.SYNC, "", _finite(sync_at))
