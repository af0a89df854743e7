"""The state codec of an ``SdsChannel``: what ``snapshot()`` / ``export_state()`` persist
and how ``restore`` rebuilds a channel from it and from the persisted log (docs/sds.md
section 5). A layer of the channel: it reads and fills the channel's own structures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from sync.sds.buffers import OutgoingEntry
from sync.sds.clock import LAMPORT_MAX, recovered_clock
from sync.sds.message import HistoryRef, decode_event
from sync.sds.state import (
    ChannelState,
    LogEntry,
    MissingState,
    OutgoingState,
    WaitingState,
)
from sync.sds.timers import TimerKind

if TYPE_CHECKING:
    from sync.sds.channel import SdsChannel

__all__ = ["REPAIR_SYNC_KEY", "SYNC_KEY", "load_log", "load_state", "snapshot_of",
           "state_reads", "waiting_snapshot"]

#: The timer key of a channel's (one) sync timer.
SYNC_KEY = ""
#: The timer of a sync carrying lingering repair requests (``SdsConfig.repair_linger``).
REPAIR_SYNC_KEY = "repair"


def snapshot_of(ch: SdsChannel) -> ChannelState:
    """What ``export_state`` persists: the clock, the buffers, the repair buffers, the heads
    and when each timer is due."""
    timers = ch._timers
    return ChannelState(
        channel_id=ch.channel_id,
        participant_id=ch.participant_id,
        lamport=ch._lamport,
        last_activity=ch._last_activity,
        outgoing=tuple(
            # By reference: the wire is in the node's log (restore is given it back).
            OutgoingState(e.message_id, None, e.attempts, e.possibly,
                          frozenset(e.bloom_senders), e.fp_product,
                          timers.due(TimerKind.RESEND, e.message_id))
            for e in ch._outgoing.values()
        ),
        waiting=waiting_snapshot(ch),
        missing=tuple(MissingState(ref, timers.due(TimerKind.LOST, mid))
                      for mid, ref in ch._missing.items()),
        lost=tuple(sorted(ch._lost)),
        repair_out=tuple((ref, when) for when, ref in ch._repair.requests.values()),
        repair_in=tuple(ch._repair.responses.items()),
        heads=tuple(ch._history.heads.values()),
        sync_at=timers.due(TimerKind.SYNC, SYNC_KEY),
    )



def waiting_snapshot(ch: SdsChannel) -> tuple[WaitingState, ...]:
    """The newest waiting messages, up to ``waiting_state_bytes``: the state is saved every
    few seconds, and a full waiting buffer (``max_waiting_bytes``) would cost that much again
    in base64 each time. Those left out are not in any log yet; after a restart they come
    again like any message we do not have (a resend, a repair, Recon)."""
    budget = ch.config.waiting_state_bytes
    out: list[WaitingState] = []
    for w in reversed(ch._waiting.values()):
        budget -= len(w.event.wire)
        if budget < 0:
            break
        out.append(WaitingState(w.event.wire, w.lost_dependency))
    out.reverse()
    return tuple(out)



def load_log(ch: SdsChannel, log: Iterable[LogEntry], *, truncated: bool) -> None:
    entries: list[tuple[int, str, str | None]] = []
    for item in log:
        mid, lamport = item[0], item[1]
        sender = item[2] if len(item) > 2 else None
        if not isinstance(mid, str) or not isinstance(lamport, int) or lamport < 0:
            raise ValueError("bad log entry")
        entries.append((lamport, mid, sender))
    entries.sort()
    ch._log.load([(lamport, mid) for lamport, mid, _ in entries], truncated=truncated)
    ch._history.load_tail(entries)
    for _, mid, _ in entries[-ch._bloom.window :]:
        ch._bloom.add(mid)



def state_reads(snap: ChannelState, max_message_size: int) -> list[str]:
    """Every id ``load_state`` asks whether the log holds (heads, lost and missing ids, the
    waiting messages and what they name, repair requests): a bounded channel's driver reads
    them before ``SdsChannel.restore`` and passes the answer in (``delivered``)."""
    ids = [ref.message_id for ref in snap.heads]
    ids += snap.lost
    ids += [m.ref.message_id for m in snap.missing]
    for w in snap.waiting:
        event = decode_event(w.wire, max_size=max_message_size, verify_signature=False)
        ids += [event.message_id, *event.history_ids]
    ids += [ref.message_id for ref, _ in snap.repair_out]
    return list(dict.fromkeys(ids))


def load_state(ch: SdsChannel, snap: ChannelState, now: float,
               outgoing_wires: Mapping[str, bytes]) -> None:
    """``outgoing_wires``: id -> canonical wire of our messages the state names by reference
    (version 2); one that is not given is not resent (it is in the log; Recon carries it) and
    counted in ``ch.outgoing_unrestored``."""
    timers, cfg, log = ch._timers, ch.config, ch._log
    # A clock persisted before the clock rule (or raised by a log entry accepted before it)
    # may be out of range: start from the largest value the rule accepts now instead.
    ch._lamport, ch.clock_recovered = recovered_clock(
        [snap.lamport, *(lam for _, lam in log.items())], now, cfg.max_lamport_ahead_ms
    )
    ch._last_activity = snap.last_activity
    delivered = log.known(ref.message_id for ref in snap.heads)
    ch._history.load_heads(
        (ref, -1 if (lam := log.lamport(ref.message_id)) is None else lam)
        for ref in snap.heads if ref.message_id in delivered)
    delivered = log.known(snap.lost)
    ch._lost.update(mid for mid in snap.lost if mid not in delivered)
    for out in snap.outgoing:
        wire = out.wire if out.wire is not None else outgoing_wires.get(out.message_id)
        if wire is None:
            ch.outgoing_unrestored += 1
            continue
        event = decode_event(wire, max_size=cfg.max_message_size, verify_signature=False)
        if out.wire is None and event.message_id != out.message_id:
            raise ValueError("outgoing wire does not match its id")
        entry = OutgoingEntry(event.message_id, event.wire, attempts=out.attempts,
                              possibly=out.possibly, bloom_senders=set(out.bloom_senders),
                              fp_product=out.fp_product, history=event.history_ids)
        when = out.resend_at if out.resend_at is not None else now + cfg.resend_interval
        if not ch._out.restore(entry, when):
            ch.outgoing_unrestored += 1
            continue
        ch._repair.remember(entry.message_id, event.sender_id, event.wire)
    delivered = log.known(m.ref.message_id for m in snap.missing)
    for m in snap.missing:
        ref = m.ref
        if ref.message_id in delivered:
            continue  # fetched by other means (e.g. Recon) while we were down
        for old in ch._deps.add_missing(ref, ref.sender_id or ""):
            ch._evict_missing(old)
        when = m.lost_at if m.lost_at is not None else now + cfg.lost_timeout
        timers.schedule(TimerKind.LOST, ref.message_id, when)
    for w in snap.waiting:
        event = decode_event(w.wire, max_size=cfg.max_message_size, verify_signature=False)
        if event.lamport is None or event.lamport > LAMPORT_MAX:
            continue
        delivered = log.known([event.message_id, *event.history_ids])
        if event.message_id in delivered:
            continue
        unmet = {h for h in event.history_ids if h not in delivered and h not in ch._lost}
        ch._wait(event, unmet, w.lost)
    for ready in [w for w in ch._waiting.values() if not w.missing]:
        ch._deps.release(ready.event.message_id)
        ch._deliver(ready.event, lost_dependency=ready.lost_dependency)
    unknown = {d for d in ch._waiters if d not in ch._missing and d not in ch._waiting}
    ch._note_missing([HistoryRef(d) for d in sorted(unknown)], now, charged_to="")
    for ref, when in snap.repair_out:
        if not log.contains(ref.message_id):
            ch._repair.want(ref, now, at=when)
    # The linger's own timer is not in the state: requests already due when we stopped keep
    # the deadline they had (due + linger) instead of lingering again from the restart.
    overdue = [when for when, _ in ch._repair.requests.values() if when <= now]
    if overdue and (linger := ch._linger_s(now)) > 0:
        ch._arm_linger(max(now, min(overdue) + linger))
    for mid, when in snap.repair_in:
        ch._repair.responses[mid] = when
        timers.schedule(TimerKind.REPAIR_RESPONSE, mid, when)
    if snap.sync_at is not None:
        ch._sync_armed_at = ch._last_activity
        timers.schedule(TimerKind.SYNC, SYNC_KEY, snap.sync_at)
