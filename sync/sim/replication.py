"""Recon, the WANT/EVENTS transfer and fetch-by-id in the simulator, driven by the node's
replication cores (``sync.replication``) exactly as ``node/replication``'s drivers drive them:

* ``ReconLifecycle`` (one per member): when a session starts and with whom, backoff, BUSY, the
  backlog range a session owns (given back when it fails or is declined), the claims of its
  transfer (gossip grace, ``ReadStored`` answered from the member's in-memory key store,
  withheld and lapsed keys back to the pool with their penalties), whether another follows;
* ``GapPlanner`` (one per member): how SDS repair, fetch-by-id and Recon divide a gap;
* the ingest core's ``screen``/``order``/``plan``: triage and causal order of every fetched
  batch before SDS.

What this module adds is the network model, nothing that decides: who is reachable, how long
a round trip takes, what a hostile peer sends. The runner only calls ``add``, ``new_message``,
``delivered``, ``missing``, ``reconnected``, ``arm`` and ``handle``.

Timing: a reconciliation runs at once in memory, frame by frame through both members' cores
(``ReplicationCore.receive``: each core holds its side's reconciliation over the member's
``SummaryKeyStore``, its reads answered from the member's key log as the node's driver answers
them: ``sync.sim.keylog``), and its
outcome lands ``frames x link latency`` (plus the transfer's round trip and bytes at the link's
bandwidth) later. A peer that went offline or across a partition meanwhile fails the session.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from sync.errors import RemoteProtocolError
from sync.gossip import SenderPolicy
from sync.ingest import VerifiedBatch
from sync.recon import ReconConfig, node_interests
from sync.recon.eventid import event_key
from sync.recon.sha256a import lanes_of
from sync.replication import (
    Action,
    ChannelSet,
    ExchangeSetup,
    FetchDue,
    GapPlanner,
    KeysWithheld,
    LifecycleConfig,
    Penalize,
    ReadStored,
    ReconLifecycle,
    ReplicationCore,
    Role,
    SendFrame,
    SessionPlan,
    StartSession,
    order,
    plan,
    screen,
)
from sync.sds import MissingEntry
from sync.sim.fetch import FETCHED, Fetching
from sync.sim.keylog import KeyLog
from sync.sim.world import Member, PeerState, World
from sync.transfer import EventsPacker

__all__ = ["NETWORK_ID", "Replication"]

NETWORK_ID = 1
#: Heap kinds of this module (the runner's are below 20).
RECON, RECON_DONE = 20, 21  # the core's timer, a session's end; a fetch's answer: FETCHED
_RECON_CONFIG = ReconConfig()
#: Node defaults (config.example.toml [recon] / [fetch]; node.replication.fetch).
_MAX_MISSING_KEYS = 100_000
_GRACE_S = 3.0
_MAX_SESSIONS = 16
_CLAIM_TIMEOUT_S = 15.0
_FETCH_MAX_IDS = 256
_FETCH_PEERS = 3
_FETCH_RETRY_S = 5.0
_FRAME_BYTES = 4 << 20
_WANT_KEY_BYTES = 72


@dataclass
class _Side:
    """One side's part of a session: its plan and the keys it fetches (answered ``stored``)."""

    member: int
    plan: SessionPlan
    keys: list[bytes] = field(default_factory=list)


@dataclass
class _Pending:
    sides: tuple[_Side, _Side]
    frames: int
    bytes: int
    ok: bool = True


@dataclass
class ReplStats:
    sessions: int = 0
    sessions_failed: int = 0
    declined: int = 0
    recon_frames: int = 0
    recon_bytes: int = 0
    transfer_bytes: int = 0
    recon_fetched: int = 0
    fetch_requests: int = 0
    fetch_answered: int = 0
    fetch_bad_answers: int = 0
    withheld: int = 0
    #: Penalties the cores asked for, by name (``Penalize``).
    penalties: dict[str, int] = field(default_factory=dict)
    pending: list[_Pending | None] = field(default_factory=list)


class Replication:
    def __init__(self, sim: World) -> None:
        self.sim = sim
        self.interests = node_interests(NETWORK_ID, [sim.channel])
        self.state: list[PeerState] = []
        self.key_of: list[bytes] = []
        self.sender_of: list[str] = []
        self.no_of_key: dict[bytes, int] = {}
        self.network_id = NETWORK_ID
        self.stats = ReplStats()
        self.fetching = Fetching(self)
        self.recon = sim.sc.recon
        self.fetch_on = sim.sc.fetch
        self._config = LifecycleConfig.of(
            interval_s=sim.sc.recon_interval, gossip_grace_s=_GRACE_S,
            max_sessions=_MAX_SESSIONS, claim_timeout_s=_CLAIM_TIMEOUT_S,
            max_missing_keys=_MAX_MISSING_KEYS)
        self._channels = frozenset([sim.channel])

    # -- the runner's calls ------------------------------------------------------------------
    def add(self, m: Member) -> None:
        # Streams of their own (a str seed hashes the same in every process): the run's main
        # generator is left as it was, so a run without Recon and fetch replays as before.
        seed = f"{self.sim.sc.seed} {m.index}"
        keys = KeyLog()
        self.state.append(PeerState(keys, ReplicationCore(
            ReconLifecycle(m.peer_id, self.interests, random.Random(f"recon {seed}"),
                           self._config),
            GapPlanner(self.sim.sc.fetch_delay, _FETCH_MAX_IDS,
                       random.Random(f"fetch {seed}"), _FETCH_PEERS),
            ExchangeSetup(keys.store, _RECON_CONFIG, _MAX_MISSING_KEYS),
            ChannelSet.of({self.sim.channel: m.channel}, m.peer_id, NETWORK_ID,
                          config=self.sim.sc.sds))))
        if self.recon and m.log:
            for no, held in enumerate(m.log[:len(self.key_of)]):
                if held:
                    keys.add(self.key_of[no])
        self.arm(m)

    def new_message(self, no: int, sender: str, lamport: int, mid: str) -> None:
        key = event_key(NETWORK_ID, self.sim.channel, sender, lamport, bytes.fromhex(mid))
        self.key_of.append(key)
        self.sender_of.append(sender)
        self.no_of_key[key] = no

    def delivered(self, m: Member, no: int) -> None:
        if self.recon:
            st = self.state[m.index]
            st.keys.add(self.key_of[no])
            st.core.poke()

    def missing(self, m: Member, entries: tuple[MissingEntry, ...]) -> None:
        """SDS lacks these events' dependencies: the core queues their fetch by id and
        prompts sessions with their senders (the node's ``ReplicationDriver.missing``)."""
        if self.fetch_on:
            self.state[m.index].core.missing(entries, self.connected(m), self.sim.now)

    def reconnected(self, m: Member) -> None:
        """A member came back (restart) or joined: a fresh connection pokes Recon."""
        if self.recon:
            self.state[m.index].core.poke()
        self.arm(m)

    def arm(self, m: Member) -> None:
        """The member's core timer, as one heap event (the node's ``ReplicationDriver.rounds``
        waits on it the same way)."""
        if not (self.recon or self.fetch_on):
            return
        st, now = self.state[m.index], self.sim.now
        due = max(st.core.get_timer(), now)
        if st.timer_at is None or due < st.timer_at or st.timer_at < now:
            st.timer_at = due
            self.sim.push(due, RECON, m.index)

    def handle(self, kind: int, who: int, payload: int) -> None:
        if kind == RECON:
            self._timer(who)
        elif kind == RECON_DONE:
            self._finish(payload)
        elif kind == FETCHED:
            self.fetching.answered(payload)

    def carry_out(self, m: Member, actions: Sequence[Action]) -> None:
        """What the node's driver does with the core's actions: penalties to standing (here:
        counted), withheld keys counted (``ReconcileSoon``: the core poked its sessions)."""
        stats = self.stats
        for action in actions:
            if isinstance(action, Penalize):
                stats.penalties[action.penalty] = stats.penalties.get(action.penalty, 0) + 1
            elif isinstance(action, KeysWithheld):
                stats.withheld += action.count

    # -- Recon -------------------------------------------------------------------------------
    def connected(self, m: Member) -> dict[str, int]:
        sim = self.sim
        return {sim.members[p].peer_id: p for p in sim.mesh.peers[m.index]
                if sim.reachable(m.index, p)}

    def _timer(self, who: int) -> None:
        sim = self.sim
        m, st = sim.members[who], self.state[who]
        if st.timer_at != sim.now or not m.online or m.gone:
            return  # armed again when the member is back
        st.timer_at = None
        connected = self.connected(m)
        latency = sim.mesh.latency
        actions = st.core.handle_timer(sim.now, connected, {
            pid: lat for pid, p in connected.items()
            if (lat := latency.get((who, p))) is not None})
        self.carry_out(m, actions)
        for action in actions:
            if isinstance(action, StartSession) and self.recon:
                self._session(m, sim.members[connected[action.peer]])
            elif isinstance(action, FetchDue):
                self.fetching.start(m, action)
        self.arm(m)

    def _session(self, a: Member, b: Member) -> None:
        sim, stats, now = self.sim, self.stats, self.sim.now
        sa, sb = self.state[a.index], self.state[b.index]
        pa = sa.core.begin(b.peer_id, Role.INITIATOR, now)
        if pa is None:
            return
        pb = sb.core.begin(a.peer_id, Role.RESPONDER, now)
        if pb is None:
            sa.core.declined(pa)
            stats.declined += 1
            return
        frame = next((x.frame for x in sa.keys.step(sa.core.start(pa),
                                                    partial(sa.core.keys_read, pa))
                      if isinstance(x, SendFrame)), None)
        frames, size, turn = 0, 0, ((sb, pb), (sa, pa))
        #: Bytes and frames each side sent (a's frames are the odd ones).
        by_side = [[0, 0], [0, 0]]
        ok = True
        try:
            while frame is not None:
                frames += 1
                size += len(frame)
                by_side[frames % 2 == 0][0] += 1
                by_side[frames % 2 == 0][1] += len(frame)
                st, plan = turn[frames % 2 == 0]
                actions = st.keys.step(st.core.receive(plan, frame, now),
                                       partial(st.core.keys_read, plan))
                frame = next((x.frame for x in actions if isinstance(x, SendFrame)), None)
        except RemoteProtocolError:
            ok = False
        stats.sessions += 1
        stats.recon_frames += frames
        stats.recon_bytes += size
        sim.stats.unicast(a.index, b.index, "recon", *by_side[0])
        sim.stats.unicast(b.index, a.index, "recon", *by_side[1])
        sides = (_Side(a.index, pa), _Side(b.index, pb))
        if ok:
            # The fetch phase: the initiator's want first (``SessionPlan.fetch_first``).
            for side in sorted(sides, key=lambda s: not s.plan.fetch_first):
                self._want(side)
        moved = sum(len(sim.wires[sim.ids[self.no_of_key[k]]])
                    for side in sides for k in side.keys)
        lat = sim.mesh.latency.get((a.index, b.index), 0.1)
        bw = sim.sc.network.bandwidth
        fetching = any(side.keys for side in sides)
        done = now + frames * lat + (2 * lat if fetching else 0.0) + (moved / bw if bw else 0)
        stats.pending.append(_Pending(sides, frames, size, ok))
        sim.push(done, RECON_DONE, a.index, len(stats.pending) - 1)

    def _want(self, side: _Side) -> None:
        """``want`` (gossip grace, claims), ``ReadStored`` answered from the key store."""
        m = self.sim.members[side.member]
        st = self.state[side.member]
        st.core.reconciled(side.plan)
        actions = st.core.want(side.plan, self.sim.now, self._wall_ms(m))
        self.carry_out(m, actions)
        read = actions[-1]
        assert isinstance(read, ReadStored)
        held = {k for k in read.keys if st.keys.contains(k)}
        # Keys of events the simulator never published (none from honest peers) are not asked.
        side.keys = [k for k in st.core.sessions.stored(read.ticket, held)
                     if k in self.no_of_key]

    def _wall_ms(self, m: Member) -> int:
        return int((self.sim.now + m.clock) * 1000)

    def _finish(self, slot: int) -> None:
        sim, stats = self.sim, self.stats
        p = stats.pending[slot]
        stats.pending[slot] = None
        assert p is not None
        a, b = (sim.members[s.member] for s in p.sides)
        alive = p.ok and sim.reachable(a.index, b.index)
        more: list[tuple[Member, Member]] = []
        if alive:
            for side, giver in zip(p.sides, (b, a), strict=True):
                self._transfer(side, giver)
            for side, peer in zip(p.sides, (b, a), strict=True):
                core = self.state[side.member].core
                self.carry_out(sim.members[side.member], core.sessions.close(side.plan))
                if core.finished(side.plan):
                    more.append((sim.members[side.member], peer))
        else:
            stats.sessions_failed += 1
            for side, peer in zip(p.sides, (b, a), strict=True):
                actions = self.state[side.member].core.failed(
                    side.plan, peer.peer_id, side.plan.role, None, sim.now)
                self.carry_out(sim.members[side.member], actions)
        for m in (a, b):
            if m.online:
                self.arm(m)
        # More to fetch (a truncated session, or backlog ranges left): the next session with
        # the same peer starts at once, with us as initiator (the node's ``sync_with``).
        for m, peer in more:
            if m.online and peer.online and sim.reachable(m.index, peer.index):
                self._session(m, peer)

    def _transfer(self, side: _Side, giver: Member) -> None:
        """WANT the claimed keys, EVENTS back in frames, through the ingest core into SDS; a
        withholding giver answers without them (``answer_done``: back to the pool, penalty)."""
        sim = self.sim
        receiver, st = sim.members[side.member], self.state[side.member]
        ticket = side.plan.ticket
        if ticket is None or not side.keys:
            return
        if not giver.honest and sim.hostile is not None and sim.hostile.withholds(giver):
            self.carry_out(receiver, st.core.sessions.answer_done(ticket, side.keys))
            return
        if not receiver.online:
            return
        nos = [self.no_of_key[k] for k in side.keys]
        packer = EventsPacker(_FRAME_BYTES, 4096)
        moved = 0
        for n in nos:
            frame = packer.add(sim.wires[sim.ids[n]])
            if frame is not None:
                moved += len(frame)
        moved += len(packer.finish())
        self.stats.transfer_bytes += moved
        self.stats.recon_fetched += len(nos)
        sim.stats.unicast(receiver.index, giver.index, "transfer", 1, _WANT_KEY_BYTES * len(nos))
        sim.stats.unicast(giver.index, receiver.index, "transfer", 1, moved)
        st.core.sessions.delivered(ticket, side.keys, sim.now)
        self.carry_out(receiver, st.core.sessions.answer_done(ticket, []))
        self.ingest(receiver, giver, nos)
        # The store took them at once (a simulated member persists what it delivers).
        st.core.committed(side.keys, {k for k in side.keys if st.keys.contains(k)})

    def ingest(self, receiver: Member, giver: Member, nos: list[int]) -> list[str]:
        """Fetched events through the ingest core: ``screen`` (invalid ends the session),
        ``order`` (causal), ``plan`` (refused by policy: counted; the rest to SDS). The ids
        taken (not refused)."""
        sim = self.sim
        batch = VerifiedBatch()
        for n in nos:
            key = self.key_of[n]
            # Verified once for the group (sync/sim/shared.py): the columns are the message's.
            batch.message_ids.append(sim.ids[n])
            batch.channels.append(sim.channel)
            batch.senders.append(self.sender_of[n])
            batch.lamports.append(sim.lamport_of[n])
            batch.keys.append(key)
            batch.lanes.append(lanes_of(key))
            batch.histories.append(())
            batch.has_content.append(True)
        actions, error = screen(batch, giver.peer_id)
        self.carry_out(receiver, actions)
        if error is not None:
            sim.rejected(receiver, giver.index, error)
            return []
        positions = order(batch)
        triaged = plan(batch, positions, giver.peer_id, self._channels,
                       SenderPolicy(receiver.peer_id), sim.now + receiver.clock,
                       receiver.channel.setup.config.max_lamport_ahead_ms)
        self.carry_out(receiver, triaged.actions)
        refused = set()
        for i, exc in triaged.refused_at:
            refused.add(i)
            sim.rejected(receiver, giver.index, exc)
        taken = [batch.message_ids[i] for i in positions if i not in refused]
        for mid in taken:
            sim.receive_fetched(receiver, sim.wires[mid])
        return taken
