"""The state codec of an ``SdsChannel``'s layers: what ``snapshot()`` persists as a
``ChannelState`` and how ``restore`` fills fresh layers from one and from the persisted log
(docs/sds.md section 5). It works on the layers' public members (``ChannelLayers``) and knows
nothing of the channel itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sync.sds.buffers import OutgoingEntry
from sync.sds.clock import LAMPORT_MAX, recovered_clock
from sync.sds.layers import ChannelLayers
from sync.sds.message import HistoryRef, decode_event
from sync.sds.state import (
    ChannelState,
    LogEntry,
    MissingState,
    OutgoingState,
    WaitingState,
)
from sync.sds.timers import TimerKind

__all__ = ["load_log", "load_state", "snapshot_of", "state_reads", "waiting_snapshot"]


def snapshot_of(layers: ChannelLayers, channel_id: str, participant_id: str) -> ChannelState:
    """What ``export_state`` persists: the clock, the buffers, the repair buffers, the heads
    and when each timer is due."""
    timers, incoming, repair = layers.timers, layers.incoming, layers.repair
    return ChannelState(
        channel_id=channel_id,
        participant_id=participant_id,
        lamport=incoming.lamport,
        last_activity=layers.schedule.last_activity,
        outgoing=tuple(
            # By reference: the wire is in the node's log (restore is given it back).
            OutgoingState(e.message_id, None, e.attempts, e.possibly,
                          frozenset(e.bloom_senders), e.fp_product,
                          timers.due(TimerKind.RESEND, e.message_id))
            for e in layers.outgoing.entries.values()
        ),
        waiting=waiting_snapshot(layers),
        missing=tuple(MissingState(ref, timers.due(TimerKind.LOST, mid))
                      for mid, ref in incoming.missing.items()),
        lost=tuple(sorted(incoming.lost)),
        repair_out=tuple((ref, when) for when, ref in repair.requests.values()),
        repair_in=tuple(repair.responses.items()),
        heads=tuple(layers.history.heads.values()),
        sync_at=layers.schedule.sync_at,
    )


def waiting_snapshot(layers: ChannelLayers) -> tuple[WaitingState, ...]:
    """The newest waiting messages, up to ``waiting_state_bytes``: the state is saved every
    few seconds, and a full waiting buffer (``max_waiting_bytes``) would cost that much again
    in base64 each time. Those left out are not in any log yet; after a restart they come
    again like any message we do not have (a resend, a repair, Recon)."""
    budget = layers.config.waiting_state_bytes
    out: list[WaitingState] = []
    for w in reversed(layers.incoming.waiting.values()):
        budget -= len(w.event.wire)
        if budget < 0:
            break
        out.append(WaitingState(w.event.wire, w.lost_dependency))
    out.reverse()
    return tuple(out)


def load_log(layers: ChannelLayers, log: Iterable[LogEntry], *, truncated: bool) -> None:
    entries: list[tuple[int, str, str | None]] = []
    for item in log:
        mid, lamport = item[0], item[1]
        sender = item[2] if len(item) > 2 else None
        if not isinstance(mid, str) or not isinstance(lamport, int) or lamport < 0:
            raise ValueError("bad log entry")
        entries.append((lamport, mid, sender))
    entries.sort()
    layers.log.load([(lamport, mid) for lamport, mid, _ in entries], truncated=truncated)
    layers.history.load_tail(entries)
    bloom = layers.bloom
    for _, mid, _ in entries[-bloom.window :]:
        bloom.add(mid)


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


def load_state(layers: ChannelLayers, snap: ChannelState, now: float,
               outgoing_wires: Mapping[str, bytes], *, resend_restored: bool = True) -> None:
    """``outgoing_wires``: id -> canonical wire of our messages the state names by reference
    (version 2); one that is not given is not resent (it is in the log; Recon carries it) and
    counted in ``stats.outgoing_unrestored``.

    One whose resend fell due while the node was down is not resent either (counted in
    ``stats.outgoing_overdue``; it stays in the repair cache): a restart prompts a Recon
    session with each peer as it connects, which carries exactly what that peer lacks. Kept,
    every deadline that passed meanwhile fired at once: a node back after a 5,000-event burst
    resent all 5,000 (8.7 MB of gossip, issue 37), most of them events its peers held, through
    the gossip pace and the links its peers were catching up on (deferred one resend
    interval, the same flood would meet the node's next events instead).

    With ``resend_restored`` off (the node's choice: it reconciles with each peer after a
    restart) the ones still ahead are left to Recon too (``stats.outgoing_left``): after a
    kill -9 mid-burst and a quick restart, thousands of them fell due within seconds, most
    held by the peers already, and since a peer's filter names only its newest ids, they were
    resent up to ``max_resends`` times, meeting the peers' Recon fetches of the same events."""
    cfg, log, stats = layers.config, layers.log, layers.stats
    incoming, repair, schedule = layers.incoming, layers.repair, layers.schedule
    # A clock persisted before the clock rule (or raised by a log entry accepted before it)
    # may be out of range: start from the largest value the rule accepts now instead.
    incoming.lamport, stats.clock_recovered = recovered_clock(
        [snap.lamport, *(lam for _, lam in log.items())], now, cfg.max_lamport_ahead_ms
    )
    schedule.last_activity = snap.last_activity
    delivered = log.known(ref.message_id for ref in snap.heads)
    layers.history.load_heads(
        (ref, -1 if (lam := log.lamport(ref.message_id)) is None else lam)
        for ref in snap.heads if ref.message_id in delivered)
    delivered = log.known(snap.lost)
    incoming.lost.update(mid for mid in snap.lost if mid not in delivered)
    for out in snap.outgoing:
        wire = out.wire if out.wire is not None else outgoing_wires.get(out.message_id)
        if wire is None:
            stats.outgoing_unrestored += 1
            continue
        event = decode_event(wire, max_size=cfg.max_message_size, verify_signature=False)
        if out.wire is None and event.message_id != out.message_id:
            raise ValueError("outgoing wire does not match its id")
        entry = OutgoingEntry(event.message_id, event.wire, attempts=out.attempts,
                              possibly=out.possibly, bloom_senders=set(out.bloom_senders),
                              fp_product=out.fp_product, history=event.history_ids)
        overdue = out.resend_at is not None and out.resend_at <= now
        if overdue:
            stats.outgoing_overdue += 1
        elif not resend_restored:
            stats.outgoing_left += 1
        elif not layers.outgoing.restore(entry, out.resend_at if out.resend_at is not None
                                         else now + cfg.resend_interval):
            stats.outgoing_unrestored += 1
            continue
        repair.remember(entry.message_id, event.sender_id, event.wire)
    delivered = log.known(m.ref.message_id for m in snap.missing)
    for m in snap.missing:
        if m.ref.message_id in delivered:
            continue  # fetched by other means (e.g. Recon) while we were down
        incoming.restore_missing(m.ref, m.lost_at if m.lost_at is not None
                                 else now + cfg.lost_timeout)
    for w in snap.waiting:
        event = decode_event(w.wire, max_size=cfg.max_message_size, verify_signature=False)
        if event.lamport is None or event.lamport > LAMPORT_MAX:
            continue
        delivered = log.known([event.message_id, *event.history_ids])
        if event.message_id in delivered:
            continue
        unmet = {h for h in event.history_ids if h not in delivered and h not in incoming.lost}
        incoming.wait(event, unmet, w.lost)
    incoming.deliver_ready()
    unknown = {d for d in incoming.waiters
               if d not in incoming.missing and d not in incoming.waiting}
    incoming.note_missing([HistoryRef(d) for d in sorted(unknown)], now, charged_to="")
    for ref, when in snap.repair_out:
        if not log.contains(ref.message_id):
            repair.want(ref, now, at=when)
    schedule.restore_linger(now)
    for mid, when in snap.repair_in:
        repair.restore_response(mid, when)
    schedule.restore(snap.last_activity, snap.sync_at)
