"""The discrete-event simulation: N members, each a real ``SdsChannel``, over ``sync.sim.network``.

One heap of (time, seq, kind, member, payload) drives it; every member step (a delivery, a
timer, a publish) is followed by the invariant checks of that member, and the run ends with
the convergence check. A violated invariant raises :class:`SimFailure`, whose text carries the
command that replays the run. Recon, the transfer and fetch-by-id live in
``sync.sim.replication`` (heap kinds 20-29), hostile members in ``sync.sim.hostile`` (30);
``Simulation.on_step`` lets a test look at every step.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.actions import Action, Broadcast, ChannelNote, GapFound, Rejected, StoreDelivered
from sync.errors import RemoteProtocolError
from sync.identity import peer_id_of
from sync.replication import ChannelSet
from sync.sds import (
    Acknowledged,
    Delivered,
    DependencyLost,
    RepairAnswered,
    RepairRefused,
    RepairRequested,
    SdsChannel,
    decode_transmission,
)
from sync.sds.profile import profile_of
from sync.sds.state import encode_state
from sync.sim import invariants
from sync.sim.hostile import HOSTILE, Hostile
from sync.sim.network import Mesh
from sync.sim.replication import RECON, Replication
from sync.sim.scenario import Scenario
from sync.sim.shared import SharedDecodeProfile, shared_verification
from sync.sim.stats import Stats
from sync.sim.world import Member, SimFailure

__all__ = ["Member", "SimFailure", "Simulation", "run"]

(_DELIVER, _TIMER, _PUBLISH, _CRASH, _RESTART, _LEAVE, _JOIN, _SPLIT, _HEAL,
 _CHECK) = range(10)
_CHANNEL = "sim"
#: How often (simulated seconds) the run looks whether every honest member is quiet.
_CHECK_EVERY = 2.0
#: Members' clocks read epoch seconds: simulated time 0 is this instant (plus their skew).
EPOCH = 1_800_000_000.0


def _key(rng: random.Random) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))


def _no_clock() -> float:
    return 0.0


class Simulation:
    """``cpu_clock``: the CPU-time clock the figures are measured with (the benchmark passes
    ``time.process_time``; sans-IO, the simulator reads no clock of its own)."""

    def __init__(self, scenario: Scenario, cpu_clock: Callable[[], float] = _no_clock) -> None:
        self.sc = scenario
        self.cpu = cpu_clock
        self.rng = random.Random(scenario.seed)
        self.mesh = Mesh(scenario.members, scenario.network, random.Random(scenario.seed + 1))
        self.heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.now = 0.0
        self.members: list[Member] = []
        self.side: list[int] = []
        #: payload number -> (bytes, origin, content message number or -1)
        self.payloads: list[tuple[bytes, int, int]] = []
        self.msg_no: dict[str, int] = {}
        self.published_at: list[float] = []
        self.holders: list[int] = []
        self.wires: dict[str, bytes] = {}
        self.stats = Stats()
        self.on_step: Callable[[Simulation, Member], None] | None = None
        self.steps = 0
        self._broadcast_once: set[int] = set()
        self.channel = _CHANNEL
        #: message number -> id, Lamport time; peer id -> member index
        self.ids: list[str] = []
        self.lamport_of: list[int] = []
        self.senders: list[str] = []
        #: message number -> honest members that delivered it
        self.honest_holders: list[int] = []
        #: member -> (time, bytes) of its repair rebroadcasts within the repair window
        self.repair_windows: dict[int, deque[tuple[float, int]]] = {}
        self.by_peer_id: dict[str, int] = {}
        # Every member decodes with it: one decode cache for the group (sync.sim.shared).
        self._profile = SharedDecodeProfile.of(profile_of(scenario.sds)) if scenario.shared \
            else None
        self.repl = Replication(self)
        self.hostile = Hostile(self) if scenario.hostile else None
        for _ in range(scenario.members):
            self._new_member(0.0)
        if self.hostile is not None:
            self.hostile.recruit()

    # -- set-up ---------------------------------------------------------------------------
    def _new_member(self, at: float) -> Member:
        sc = self.sc
        index = len(self.members)
        key = _key(self.rng)
        pid = peer_id_of(key)
        clock = EPOCH + (self.rng.uniform(-sc.skew, sc.skew) if sc.skew else 0.0)
        ch = SdsChannel(_CHANNEL, pid, key if sc.signed else None, config=sc.sds,
                        rng=random.Random(self.rng.getrandbits(64)), now=at + clock,
                        verify_signatures=sc.signed, profile=self._profile)
        member = Member(index, key, pid, ch, clock, at)
        self.members.append(member)
        self.by_peer_id[pid] = index
        self.side.append(0)
        if index >= len(self.mesh.peers):
            self.mesh.add_member(self._alive())
        self._arm(member)
        self.repl.add(member)
        return member

    def reachable(self, a: int, b: int) -> bool:
        """Whether members ``a`` and ``b`` can talk now (both up, same side of a partition)."""
        ma, mb = self.members[a], self.members[b]
        return (ma.online and mb.online and not ma.gone and not mb.gone
                and self.side[a] == self.side[b])

    def push(self, at: float, kind: int, member: int = -1, payload: int = -1) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (at, self._seq, kind, member, payload))

    def _arm(self, m: Member) -> None:
        due = m.channel.get_timer()
        if due is None:
            m.timer_at = None
            return
        at = max(due - m.clock, self.now)
        if m.timer_at is None or at < m.timer_at or m.timer_at < self.now:
            m.timer_at = at
            self.push(at, _TIMER, m.index)

    def fail(self, what: str) -> SimFailure:
        return SimFailure(f"invariant violated at t={self.now:.3f}s, step {self.steps}: {what}\n"
                          f"replay: {self.sc.command()}")

    # -- running --------------------------------------------------------------------------
    def run(self) -> Stats:
        if not self.sc.shared:
            return self._run()
        with shared_verification():
            return self._run()

    def _run(self) -> Stats:
        sc = self.sc
        self._schedule_traffic()
        end = sc.duration + sc.settle
        self.push(sc.duration, _CHECK)
        cpu0 = self.cpu()
        while self.heap:
            at, _, kind, who, payload = heapq.heappop(self.heap)
            if at > end:
                break
            self.now = at
            if kind == _CHECK:
                stats = self.stats
                if (at >= sc.duration and stats.caught_up_at <= stats.disrupted_at
                        and invariants.quiet(self, answers=False)):
                    stats.caught_up_at = at
                if invariants.quiet(self):
                    stats.quiet_at = at
                    break
                self.push(at + _CHECK_EVERY, _CHECK)
                continue
            self._dispatch(kind, who, payload)
        self.stats.cpu_seconds = self.cpu() - cpu0
        self.stats.published_until = sc.duration
        r = self.repl.stats
        self.stats.fetched = r.fetch_answered
        self.stats.replication = {
            "recon_sessions": r.sessions, "recon_sessions_failed": r.sessions_failed,
            "recon_declined": r.declined, "recon_frames": r.recon_frames,
            "recon_bytes": r.recon_bytes, "transfer_bytes": r.transfer_bytes,
            "recon_fetched": r.recon_fetched, "fetch_requests": r.fetch_requests,
            "fetch_answered": r.fetch_answered, "fetch_bad_answers": r.fetch_bad_answers,
            "withheld": r.withheld,
            "short_answer_penalties": r.penalties.get("short_answer", 0),
            **{f"penalty_{k}": v for k, v in sorted(r.penalties.items())}}
        self.stats.sim_seconds = self.now
        invariants.check_converged(self)
        return self.stats

    def _schedule_traffic(self) -> None:
        sc, rng = self.sc, self.rng
        t = 0.0
        while sc.rate > 0:
            t += rng.expovariate(sc.rate)
            if t >= sc.duration:
                break
            self.push(t, _PUBLISH)
        for rate, kind in ((sc.crash_rate, _CRASH), (sc.leave_rate, _LEAVE),
                           (sc.join_rate, _JOIN)):
            t = 0.0
            while rate > 0:
                t += rng.expovariate(rate)
                if t >= sc.duration:
                    break
                self.push(t, kind)
        for start, stop, fraction in sc.partitions:
            self.push(start, _SPLIT, payload=int(fraction * 1000))
            self.push(stop, _HEAL)

    def _alive(self) -> list[bool]:
        return [x.online and not x.gone for x in self.members]

    def _pick(self) -> Member | None:
        live = [m for m in self.members if m.online and m.honest]
        return self.rng.choice(live) if live else None

    def _dispatch(self, kind: int, who: int, payload: int) -> None:
        if kind == _DELIVER:
            m = self.members[who]
            if m.online:
                self._deliver(m, payload)
        elif kind == _TIMER:
            m = self.members[who]
            if m.online and m.timer_at == self.now:
                m.timer_at = None
                t0 = self.cpu()
                actions = self.channels(m).handle_timer(self.now + m.clock)
                self.stats.member_cpu += self.cpu() - t0
                self._after(m, actions)
        elif kind == _PUBLISH:
            publisher = self._pick()
            if publisher is not None:
                self._publish(publisher)
        elif kind in (_CRASH, _LEAVE):
            victim = self._pick()
            if victim is not None and sum(x.online for x in self.members) > 2:
                victim.online = False
                self.mesh.detach(victim.index, self._alive())
                if kind == _LEAVE:
                    victim.gone = True
                else:
                    self.push(self.now + self.sc.downtime, _RESTART, victim.index)
        elif kind == _RESTART:
            self._restart(self.members[who])
            self.stats.disrupted_at = self.now
        elif kind == _JOIN:
            self._new_member(self.now)
        elif kind == _SPLIT:
            for m in self.members:
                self.side[m.index] = 1 if self.rng.random() < payload / 1000 else 0
        elif kind == _HEAL:
            self.side = [0] * len(self.members)
            self.stats.disrupted_at = self.now
        elif kind >= HOSTILE:
            if self.hostile is not None:
                self.hostile.handle(kind, who, payload)
        elif kind >= RECON:
            self.repl.handle(kind, who, payload)

    def _publish(self, m: Member) -> None:
        content = self.rng.randbytes(self.sc.content_bytes)
        t0 = self.cpu()
        sent = self.channels(m).publish(_CHANNEL, [content], self.now + m.clock)
        self.stats.member_cpu += self.cpu() - t0
        self.stats.published += 1
        self._after(m, sent.actions, published=True)
        self.broadcast(m, sent.wires[0])

    def _deliver(self, m: Member, payload: int) -> None:
        data, origin, _ = self.payloads[payload]
        self._receive(m, data, origin)

    def _receive(self, m: Member, data: bytes, origin: int = -1) -> None:
        t0 = self.cpu()
        channels = self.channels(m)
        actions = channels.receive(_CHANNEL, data, self.now + m.clock, None)
        refused = next((a for a in actions if isinstance(a, Rejected)), None)
        if refused is not None:
            self.stats.member_cpu += self.cpu() - t0
            self.rejected(m, origin, RemoteProtocolError(refused.reason, None, refused.kind))
            return
        actions += channels.drain(_CHANNEL)
        self.stats.member_cpu += self.cpu() - t0
        self.stats.receptions += 1
        self._after(m, actions)

    def receive_fetched(self, m: Member, wire: bytes) -> None:
        """An event Recon or fetch-by-id brought (its canonical wire), unless already held."""
        if m.online and not m.gone:
            self._receive(m, wire)

    def rejected(self, m: Member, origin: int, exc: RemoteProtocolError) -> None:
        """Hostile input is refused and counted; an honest member's never is."""
        # The error's kind is its metric label where sync.errors has kinds (issue 30), else
        # the reason up to its first colon (what follows is detail: ids, timestamps).
        kind = getattr(exc, "kind", None)
        reason = str(getattr(kind, "value", None) or exc.reason.split(":")[0][:60])
        self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1
        if m.honest and (origin < 0 or self.members[origin].honest):
            raise self.fail(f"member {m.index} rejected honest input: {exc.reason}")

    def broadcast(self, m: Member, data: bytes) -> None:
        sc, stats = self.sc, self.stats
        number = len(self.payloads)
        tx = decode_transmission(data, verify_signature=False, check_id=False)
        content_no = self.msg_no.get(tx.event.message_id, -1) if tx.event.content else -1
        # Losses are counted for a message's first broadcast only: a (message, member) pair
        # that then needs a resend or a repair.
        first = content_no >= 0 and content_no not in self._broadcast_once
        if first:
            self._broadcast_once.add(content_no)
        if not m.honest:
            kind = "hostile"
        elif content_no < 0:
            kind = "sync_request" if tx.repair_request else "sync"
        elif first:
            kind = "content"
        else:
            kind = "resend" if tx.event.sender_id == m.peer_id else "repair"
        stats.floods[kind] = stats.floods.get(kind, 0) + 1
        if kind == "repair":
            invariants.check_repair_budget(self, m, len(data))
        stats.flood_bytes[kind] = stats.flood_bytes.get(kind, 0) + len(data)
        self.payloads.append((data, m.index, content_no))
        if sc.signed:
            # One Ed25519 check per message for the whole group (its result is the same at
            # every member): members are told it is verified, as the node's worker does.
            for other in self.members:
                if other is not m and other.online:
                    other.channel.layers.signatures.trust(tx.event)
        flood = self.mesh.flood(m.index, len(data), self.now, self._alive(), self.side)
        size = len(data)
        for member, copies in flood.sent.items():
            stats.sent(member, copies, size)
        for member, copies in flood.received.items():
            stats.got(member, copies, size)
        stats.by_kind(kind, sum(flood.received.values()) * size, len(tx.repair_request))
        loss = sc.network.delivery_loss
        for member, at in flood.arrival.items():
            if loss and self.rng.random() < loss:
                if first:
                    stats.lost += 1
                continue
            self.push(at, _DELIVER, member, number)
        if first:
            reached = len(flood.arrival)
            stats.unreached += sum(1 for x in self.members if x.online and not x.gone) - 1 - reached

    def channels(self, m: Member) -> ChannelSet:
        """Member ``m``'s channels, held by its replication core: every input of its channel
        goes in there, as the node's does."""
        return self.repl.state[m.index].core.channels

    def _after(self, m: Member, actions: Sequence[Action], *, published: bool = False) -> None:
        """What a step of member ``m``'s core returned: deliveries, gaps, what SDS reported
        and the messages its timers made (broadcast last)."""
        self.steps += 1
        stats = self.stats
        sent: list[bytes] = []
        for action in actions:
            if isinstance(action, StoreDelivered):
                for delivered in action.delivered:
                    self._on_delivered(m, delivered)
            elif isinstance(action, Broadcast):
                sent.append(action.datagram)
            elif isinstance(action, GapFound):
                self.repl.missing(m, action.entries)
            elif isinstance(action, ChannelNote):
                ev = action.event
                if isinstance(ev, Acknowledged) and m.honest:
                    invariants.check_ack(self, m, ev.message_id)
                elif isinstance(ev, DependencyLost):
                    m.declared_lost.add(ev.message_id)
                    stats.declared_lost += 1
                elif isinstance(ev, RepairRequested):
                    stats.repair_requests += len(ev.message_ids)
                elif isinstance(ev, RepairAnswered):
                    stats.repair_responses += 1
                elif isinstance(ev, RepairRefused):
                    stats.repair_refused += len(ev.message_ids)
        for data in sent:
            self.broadcast(m, data)
        invariants.check_bounds(self, m)
        if self.on_step is not None:
            self.on_step(self, m)
        self._arm(m)
        self.repl.arm(m)

    def _on_delivered(self, m: Member, ev: Delivered) -> None:
        no = self.msg_no.get(ev.message_id)
        if no is None:
            no = self.msg_no[ev.message_id] = len(self.published_at)
            self.published_at.append(self.now)
            self.holders.append(0)
            self.honest_holders.append(0)
            self.wires[ev.message_id] = ev.wire
            self.ids.append(ev.message_id)
            self.senders.append(ev.sender_id)
            self.lamport_of.append(ev.lamport)
            self.repl.new_message(no, ev.sender_id, ev.lamport, ev.message_id)
        log = m.log
        if len(log) <= no:
            log.extend(bytes(no + 64 - len(log)))
        if log[no]:
            raise self.fail(f"member {m.index} delivered {ev.message_id[:12]} twice")
        if not ev.lost_dependency:
            for h in ev.causal_history:
                hn = self.msg_no.get(h)
                if hn is None or hn >= len(log) or not log[hn]:
                    raise self.fail(f"member {m.index} delivered {ev.message_id[:12]} before "
                                    f"its dependency {h[:12]}")
        log[no] = 1
        m.held += 1
        self.holders[no] += 1
        if m.honest:
            self.honest_holders[no] += 1
        self.repl.delivered(m, no)
        if ev.sender_id != m.peer_id:
            self.stats.latency.append(self.now - self.published_at[no])
        else:
            self.stats.deliveries_own += 1

    def _restart(self, m: Member) -> None:
        """A crashed member comes back from its saved state and its persisted log."""
        sc = self.sc
        ch = m.channel
        state = encode_state(ch.snapshot())
        log = [(mid, lamport) for lamport, mid in ch.layers.log.entries()]
        recent = [self.wires[mid] for mid, _ in log[-sc.sds.repair_cache_size:]
                  if mid in self.wires]
        m.channel = SdsChannel.restore(state, m.key if sc.signed else None, log=log,
                                       cached_wires=recent, config=sc.sds,
                                       rng=random.Random(self.rng.getrandbits(64)),
                                       now=self.now + m.clock, verify_signatures=sc.signed,
                                       profile=self._profile,
                                       # As the node: Recon carries what a restart left.
                                       resend_restored=not sc.recon)
        # The same core goes on with the restored channel (the node starts a new one: in the
        # simulator a member's sessions and fetches outlive its channel's crash).
        channels = self.channels(m)
        channels.channels[_CHANNEL] = m.channel
        m.online = True
        m.timer_at = None
        self.mesh.attach(m.index, self._alive())
        self.stats.restarts += 1
        self._after(m, channels.drain(_CHANNEL))
        self.repl.reconnected(m)

def run(scenario: Scenario, cpu_clock: Callable[[], float] = _no_clock) -> Stats:
    return Simulation(scenario, cpu_clock).run()
