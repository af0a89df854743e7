"""Recon, the WANT/EVENTS transfer and fetch-by-id in the simulator, driven by the node's own
sans-IO cores: ``PeerScheduler`` (when and with whom), ``ReconExchange``/``ReconSession`` over
a ``MemoryKeyStore`` per member (what differs), ``WantServer``/``EventsPacker`` for the sizes
of the transfer, ``FetchQueue`` and ``plan_peers`` (which missing ids to fetch, when and from
whom).

The seam (docs/sim.md): this module is the one place the simulator calls replication rules.
It stands where ``node/replication`` drivers stand, so when those rules move into one
replication core in ``sync/`` (issue 30), this driver is what changes; the runner only calls
``delivered``, ``missing``, ``arm`` and ``handle``.

Timing: a reconciliation runs at once in memory, frame by frame through both exchanges, and
its outcome lands ``frames x link latency`` (plus the transfer's round trip and bytes at the
link's bandwidth) later, when the fetched events are fed to SDS in Lamport order (the order a
catch-up is ingested in). A peer that went offline or across a partition meanwhile fails the
session (the initiator backs it off, as the node does).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sync.errors import RemoteProtocolError
from sync.recon import MemoryKeyStore, PeerScheduler, ReconConfig, ReconSession, node_interests
from sync.recon.eventid import event_key
from sync.sds import MissingEntry
from sync.transfer import (
    EventsPacker,
    FetchQueue,
    ReconExchange,
    SendFrame,
    not_recent,
    plan_peers,
)

if TYPE_CHECKING:
    from sync.sim.runner import Member, Simulation

__all__ = ["NETWORK_ID", "Replication"]

NETWORK_ID = 1
#: Heap kinds of this module (the runner's are below 20).
RECON, RECON_DONE, FETCH, FETCHED = 20, 21, 22, 23
_RECON_CONFIG = ReconConfig()
_MAX_MISSING_KEYS = 100_000
#: Node defaults (config.example.toml [recon] / [fetch]).
_MIN_ROUND_S = 1.0
_FETCH_BATCH = 64
_FETCH_EXTRA = 2
_FETCH_RETRY_S = 5.0
_FRAME_BYTES = 4 << 20
_WANT_KEY_BYTES = 72
_GRACE_MS = 3000


@dataclass
class PeerState:
    """One member's replication state beside its SDS channel."""

    keys: MemoryKeyStore
    sched: PeerScheduler
    fetch: FetchQueue
    recon_at: float | None = None
    fetch_at: float | None = None


@dataclass
class _Pending:
    initiator: int
    responder: int
    #: Message numbers each side fetches (initiator's, responder's).
    wants: tuple[list[int], list[int]]
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
    withheld: int = 0
    pending: list[_Pending] = field(default_factory=list)


class Replication:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.interests = node_interests(NETWORK_ID, [sim.channel])
        self.state: list[PeerState] = []
        self.key_of: list[bytes] = []
        self.no_of_key: dict[bytes, int] = {}
        self.stats = ReplStats()
        self._fetches: list[tuple[int, list[MissingEntry], list[int]]] = []
        self.recon = sim.sc.recon
        self.fetch_on = sim.sc.fetch

    # -- the runner's calls ------------------------------------------------------------------
    def add(self, m: Member) -> None:
        # A stream of its own (a str seed hashes the same in every process): the run's main
        # generator is left as it was, so a run without Recon replays as before it existed.
        rng = random.Random(f"recon {self.sim.sc.seed} {m.index}")
        sched = PeerScheduler(m.peer_id, self.interests, rng,
                              interval_s=self.sim.sc.recon_interval, min_round_s=_MIN_ROUND_S)
        self.state.append(PeerState(MemoryKeyStore(), sched,
                                    FetchQueue(self.sim.sc.fetch_delay, _FETCH_BATCH)))
        if self.recon:
            for no in range(len(self.key_of)):
                if m.log and no < len(m.log) and m.log[no]:
                    self.state[m.index].keys.insert(self.key_of[no])
        self.arm(m)

    def new_message(self, no: int, sender: str, lamport: int, mid: str) -> None:
        key = event_key(NETWORK_ID, self.sim.channel, sender, lamport, bytes.fromhex(mid))
        self.key_of.append(key)
        self.no_of_key[key] = no

    def delivered(self, m: Member, no: int) -> None:
        if self.recon:
            st = self.state[m.index]
            st.keys.insert(self.key_of[no])
            st.sched.poke()

    def missing(self, m: Member, entries: tuple[MissingEntry, ...]) -> None:
        if self.fetch_on:
            self.state[m.index].fetch.want(entries, self.sim.now)

    def reconnected(self, m: Member) -> None:
        """A member came back (restart) or joined: a fresh connection pokes Recon."""
        if self.recon:
            self.state[m.index].sched.poke()
        self.arm(m)

    def arm(self, m: Member) -> None:
        st, now = self.state[m.index], self.sim.now
        if self.recon:
            due = max(st.sched.get_timer(), now)
            if st.recon_at is None or due < st.recon_at or st.recon_at < now:
                st.recon_at = due
                self.sim.push(due, RECON, m.index)
        if self.fetch_on:
            t = st.fetch.get_timer()
            if t is not None:
                due = max(t, now)
                if st.fetch_at is None or due < st.fetch_at or st.fetch_at < now:
                    st.fetch_at = due
                    self.sim.push(due, FETCH, m.index)

    def handle(self, kind: int, who: int, payload: int) -> None:
        if kind == RECON:
            self._round(who)
        elif kind == RECON_DONE:
            self._finish(self.stats.pending[payload], payload)
        elif kind == FETCH:
            self._fetch(who)
        elif kind == FETCHED:
            self._fetched(payload)

    # -- Recon -------------------------------------------------------------------------------
    def _connected(self, m: Member) -> dict[str, int]:
        sim = self.sim
        return {sim.members[p].peer_id: p for p in sim.mesh.peers[m.index]
                if sim.reachable(m.index, p)}

    def _round(self, who: int) -> None:
        sim = self.sim
        m, st = sim.members[who], self.state[who]
        if st.recon_at != sim.now or not m.online or m.gone:
            return
        st.recon_at = None
        connected = self._connected(m)
        latency = sim.mesh.latency
        chosen = st.sched.handle_timer(sim.now, connected,
                                       lambda pid: latency.get((who, connected[pid])))
        if chosen is not None:
            self._session(m, sim.members[connected[chosen]])
        self.arm(m)

    def _session(self, a: Member, b: Member) -> None:
        sim, stats = self.sim, self.stats
        sa, sb = self.state[a.index], self.state[b.index]
        if not sa.sched.begin_initiator(b.peer_id):
            return
        if not sb.sched.begin_responder(a.peer_id):
            sa.sched.end(b.peer_id, initiator=True)
            stats.declined += 1
            return
        now = sim.now
        ea = ReconExchange(ReconSession.initiator(sa.keys, self.interests, _RECON_CONFIG,
                                                  peer=b.peer_id), _MAX_MISSING_KEYS,
                           peer=b.peer_id, started=now)
        eb = ReconExchange(ReconSession.responder(sb.keys, self.interests, _RECON_CONFIG,
                                                  peer=a.peer_id), _MAX_MISSING_KEYS,
                           peer=a.peer_id, started=now)
        frame: bytes | None = ea.start()
        frames, size, turn = 0, 0, (eb, ea)
        ok = True
        try:
            while frame is not None:
                frames += 1
                size += len(frame)
                actions = turn[frames % 2 == 0].receive(frame, now)
                frame = next((x.frame for x in actions if isinstance(x, SendFrame)), None)
        except RemoteProtocolError:
            ok = False
        stats.sessions += 1
        stats.recon_frames += frames
        stats.recon_bytes += size
        sim.stats.sent(a.index, (frames + 1) // 2, size // 2)
        sim.stats.sent(b.index, frames // 2, size // 2)
        # The gossip grace (``not_recent``, [recon] gossip_grace_s): events younger than it
        # by the fetching side's wall clock are left to gossip, as the node does.
        wants = ([self.no_of_key[k] for k in not_recent(ea.missing, self._wall_ms(a), _GRACE_MS)
                  if k in self.no_of_key],
                 [self.no_of_key[k] for k in not_recent(eb.missing, self._wall_ms(b), _GRACE_MS)
                  if k in self.no_of_key])
        pending = _Pending(a.index, b.index, wants, frames, size, ok)
        lat = sim.mesh.latency.get((a.index, b.index), 0.1)
        moved = sum(len(sim.wires[sim.ids[n]]) for side in wants for n in side)
        bw = sim.sc.network.bandwidth
        done = now + frames * lat + (2 * lat if any(wants) else 0.0) + (moved / bw if bw else 0)
        stats.pending.append(pending)
        sim.push(done, RECON_DONE, a.index, len(stats.pending) - 1)

    def _wall_ms(self, m: Member) -> int:
        return int((self.sim.now + m.clock) * 1000)

    def _finish(self, p: _Pending, slot: int) -> None:
        sim, stats = self.sim, self.stats
        self.stats.pending[slot] = _DONE
        a, b = sim.members[p.initiator], sim.members[p.responder]
        sa, sb = self.state[a.index], self.state[b.index]
        sa.sched.end(b.peer_id, initiator=True)
        sb.sched.end(a.peer_id, initiator=False)
        alive = p.ok and sim.reachable(a.index, b.index)
        withheld = False
        if alive:
            for receiver, giver, nos in ((a, b, p.wants[0]), (b, a, p.wants[1])):
                if not giver.honest and sim.hostile is not None \
                        and sim.hostile.withholds(giver):
                    withheld = withheld or bool(nos)
                    stats.withheld += len(nos)
                    continue
                self._ingest(receiver, giver, nos)
        if alive and not withheld:
            sa.sched.succeeded(b.peer_id)
            sa.sched.learned(b.peer_id, self.interests)
        else:
            stats.sessions_failed += 1
            sa.sched.failed(b.peer_id, sim.now)
        if a.online:
            self.arm(a)
        if b.online:
            self.arm(b)

    def _ingest(self, receiver: Member, giver: Member, nos: list[int]) -> None:
        """The transfer: WANT the keys, EVENTS back in frames, fed to SDS oldest first."""
        sim = self.sim
        if not nos or not receiver.online:
            return
        packer = EventsPacker(_FRAME_BYTES, 4096)
        moved = 0
        wires = []
        for n in sorted(nos, key=lambda n: sim.lamport_of[n]):
            wire = sim.wires[sim.ids[n]]
            wires.append(wire)
            frame = packer.add(wire)
            if frame is not None:
                moved += len(frame)
        moved += len(packer.finish())
        self.stats.transfer_bytes += moved
        self.stats.recon_fetched += len(nos)
        sim.stats.sent(receiver.index, 1, _WANT_KEY_BYTES * len(nos))
        sim.stats.got(giver.index, 1, _WANT_KEY_BYTES * len(nos))
        sim.stats.sent(giver.index, 1, moved)
        sim.stats.got(receiver.index, 1, moved)
        for wire in wires:
            sim.receive_fetched(receiver, wire)

    # -- fetch by id -------------------------------------------------------------------------
    def _fetch(self, who: int) -> None:
        sim = self.sim
        m, st = sim.members[who], self.state[who]
        if st.fetch_at != sim.now:
            return
        st.fetch_at = None
        if not m.online:
            return
        batch = [e for e in st.fetch.handle_timer(sim.now) if m.channel.is_missing(e.message_id)]
        if batch:
            self._ask(m, batch)
        self.arm(m)

    def _ask(self, m: Member, batch: list[MissingEntry]) -> None:
        """Whom to ask (``plan_peers``: the senders, then others at random) and what each
        answers: the ids it holds that nobody before it answered."""
        sim = self.sim
        by_pid = sim.by_peer_id
        senders = [e.sender_id for e in batch if e.sender_id in by_pid]
        others = [sim.members[p].peer_id for p in sim.mesh.peers[m.index]]
        order = plan_peers(senders, others, _FETCH_EXTRA, frozenset([m.peer_id]), sim.rng)
        wanted = {e.message_id for e in batch}
        got: list[int] = []
        slowest = 0.0
        for pid in order:
            if not wanted:
                break
            peer = sim.members[by_pid[pid]]
            if not sim.reachable(m.index, peer.index) or not peer.honest:
                continue
            self.stats.fetch_requests += 1
            sim.stats.sent(m.index, 1, 8 + 66 * len(wanted))
            held = [mid for mid in wanted if peer.channel.has_delivered(mid)]
            for mid in held:
                no = sim.msg_no[mid]
                got.append(no)
                size = len(sim.wires[mid])
                sim.stats.sent(peer.index, 1, size)
                sim.stats.got(m.index, 1, size)
            wanted.difference_update(held)
            lo, hi = sim.sc.network.latency
            slowest = max(slowest, 2 * sim.mesh.latency.get((m.index, peer.index),
                                                             (lo + hi) / 2))
        self.stats.fetch_answered += len(got)
        self._fetches.append((m.index, batch, got))
        sim.push(sim.now + (slowest or _FETCH_RETRY_S), FETCHED, m.index,
                 len(self._fetches) - 1)

    def _fetched(self, slot: int) -> None:
        sim = self.sim
        who, batch, got = self._fetches[slot]
        self._fetches[slot] = (who, [], [])
        m, st = sim.members[who], self.state[who]
        st.fetch.done(batch)
        if m.online:
            for no in sorted(got, key=lambda n: sim.lamport_of[n]):
                sim.receive_fetched(m, sim.wires[sim.ids[no]])
            still = [e for e in batch if m.channel.is_missing(e.message_id)]
            if still:
                # Asked again later (the node retries while SDS still reports it missing).
                st.fetch.want(still, sim.now + _FETCH_RETRY_S - sim.sc.fetch_delay)
            self.arm(m)


_DONE = _Pending(-1, -1, ([], []), 0, 0, False)
