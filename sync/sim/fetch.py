"""Fetch-by-id in the simulator, run as ``node/replication/fetch.py`` runs it around the same
core (``sync.replication.GapPlanner``), over the simulated links:

* ``grace_s`` after SDS reports a dependency missing (``MissingDependencies``), the core's
  timer makes a fetch due (``FetchDue``) and ``plan_fetch`` gives a ``FetchPlan``: the ids SDS
  still misses, and whom to ask (the original senders among the connected peers first, then 3
  other connected peers in a random order);
* **one fetch at a time per member** (the core makes the next due once ``fetched`` has the
  plan back): each peer in turn is asked, over its own link, only for what is still wanted (the
  request is ``sync.transfer.encode_request``); its answer comes back a round trip later
  (plus its bytes at the link's bandwidth), is read by ``sync.transfer.FetchReader`` (an
  answer holding more events than were asked breaks the protocol: ``GapPlanner.bad_answer``,
  the peer pays) and each event goes through the ingest core like the node's
  ``FetchedIngest.ingest`` (an invalid one is refused, counted and charged to the peer);
* a peer that is offline or cut off when asked, or by the time its answer is due, fails like
  a broken stream (the next peer is asked); what nobody answered is left to Recon
  (``ReplicationCore.fetched`` -> ``ReconcileSoon``); SDS-R's own requests wait ``T_req``
  (30-120 s), so they go out only for what fetch-by-id and Recon did not close.

Every request and answer is counted as bytes and frames sent by one member and received by
the other (kinds ``fetch_request`` and ``fetch_answer``): the frames' bytes (length prefix
included) plus the stream's protocol negotiation (``STREAM_BYTES`` each way).

Hostile peers: ``withhold`` answers nothing (an empty answer, as for unknown ids: no penalty,
the next peer is asked); ``junk`` answers with a forged copy (signature broken) of each event
it holds, and every other request with one frame more than was asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sync.errors import RemoteProtocolError
from sync.framing import encode_frame
from sync.ingest import IngestSpec, verify_wires
from sync.peerscore import penalty_of
from sync.replication import Action, FetchDue, FetchPlan, Penalize, Rejected, screen
from sync.sim.world import Member, PeerState, World
from sync.transfer import FetchReader, encode_request

__all__ = ["FETCHED", "STREAM_BYTES", "Fetching"]

#: Heap kind (``sync.sim.replication``'s range, 20-29).
FETCHED = 23
#: ``node.replication.verify.MAX_EVENT_BYTES``: the largest event a fetch answer may hold.
MAX_EVENT_BYTES = 1 << 20
#: Opening a stream: multistream-select's header and the protocol id, each a length-prefixed
#: line (``/multistream/1.0.0``, ``/syncnode/fetch/1.0.0``), sent by each side.
STREAM_BYTES = 1 + len(b"/multistream/1.0.0\n") + 1 + len(b"/syncnode/fetch/1.0.0\n")


@dataclass
class _Run:
    """One member's fetch in flight: its plan, the peers left to ask, the answer on its way."""

    member: int
    plan: FetchPlan
    todo: list[str]
    peer: int = -1
    asked: list[str] = field(default_factory=list)
    #: The answer's frames, and per frame the message number it carries (-1: forged).
    frames: list[bytes] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)


class FetchCounters(Protocol):
    fetch_requests: int
    fetch_answered: int
    fetch_bad_answers: int


class Replicator(Protocol):
    """What fetch-by-id asks of the simulated replication that runs it
    (``sync.sim.replication.Replication``)."""

    @property
    def sim(self) -> World: ...
    @property
    def network_id(self) -> int: ...
    @property
    def state(self) -> Sequence[PeerState]: ...
    @property
    def stats(self) -> FetchCounters: ...

    def connected(self, m: Member) -> dict[str, int]: ...
    def arm(self, m: Member) -> None: ...
    def carry_out(self, m: Member, actions: Sequence[Action]) -> None: ...
    def ingest(self, receiver: Member, giver: Member, nos: list[int]) -> list[str]: ...


class Fetching:
    def __init__(self, repl: Replicator) -> None:
        self.repl = repl
        self.sim = repl.sim
        self._runs: list[_Run | None] = []
        self._spec = IngestSpec(repl.network_id, max_event_bytes=MAX_EVENT_BYTES)
        self._junk_answers = 0

    def start(self, m: Member, due: FetchDue) -> None:
        """The member's core made a fetch due: plan it on what SDS still misses, and ask."""
        st = self.repl.state[m.index]
        fetch = st.core.plan_fetch(due, {e.message_id for e in due.batch
                                         if m.channel.layers.incoming.is_missing(e.message_id)},
                                   list(self.repl.connected(m)), ())
        self._runs.append(_Run(m.index, fetch, list(fetch.peers)))
        self._next(len(self._runs) - 1)

    def _next(self, slot: int) -> None:
        """Ask the next peer of the plan for what is still wanted, or end the fetch."""
        sim = self.sim
        run = self._runs[slot]
        assert run is not None
        m = sim.members[run.member]
        while run.plan.ids and run.todo and m.online:
            peer = sim.members[sim.by_peer_id[run.todo.pop(0)]]
            if not sim.reachable(m.index, peer.index):
                continue  # the stream cannot open: the next peer
            run.peer, run.asked = peer.index, sorted(run.plan.ids)
            request = encode_frame(encode_request(run.asked))
            sim.stats.unicast(m.index, peer.index, "fetch_request", 1,
                              len(request) + STREAM_BYTES)
            self.repl.stats.fetch_requests += 1
            run.frames, run.numbers = self._answer(peer, run.asked)
            size = sum(len(encode_frame(f)) for f in run.frames) + STREAM_BYTES
            sim.stats.unicast(peer.index, m.index, "fetch_answer", len(run.frames), size)
            lat = sim.mesh.latency.get((m.index, peer.index), sum(sim.sc.network.latency) / 2)
            bw = sim.sc.network.bandwidth
            sim.push(sim.now + 2 * lat + (size / bw if bw else 0.0), FETCHED, m.index, slot)
            return
        self._end(slot)

    def _answer(self, peer: Member, ids: list[str]) -> tuple[list[bytes], list[int]]:
        """What ``peer`` sends back for ``ids``: the events it holds, then the empty frame."""
        sim, hostile = self.sim, self.sim.hostile
        behaviour = hostile.behaviour.get(peer.index) if hostile is not None else None
        frames: list[bytes] = []
        numbers: list[int] = []
        if behaviour != "withhold":
            for mid in ids:
                if peer.channel.layers.log.contains(mid):
                    wire = sim.wires[mid]
                    if behaviour == "junk":
                        # One bit flipped: its id or signature no longer checks out.
                        wire, no = wire[:-1] + bytes([wire[-1] ^ 1]), -1
                    else:
                        no = sim.msg_no[mid]
                    frames.append(wire)
                    numbers.append(no)
        if behaviour == "junk":
            self._junk_answers += 1
            if self._junk_answers % 2 == 0:
                frames += [b"junk"] * (len(ids) + 1 - len(frames))
                numbers += [-1] * (len(frames) - len(numbers))
        return [*frames, b""], [*numbers, -1]

    def answered(self, slot: int) -> None:
        """The answer of the peer asked arrived: read it, ingest it, ask the next peer."""
        sim, repl = self.sim, self.repl
        run = self._runs[slot]
        assert run is not None
        m, peer = sim.members[run.member], sim.members[run.peer]
        if not m.online:
            self._end(slot)
            return
        if sim.reachable(m.index, peer.index):
            reader = FetchReader(run.asked, MAX_EVENT_BYTES, peer.peer_id)
            try:
                got = [(f, n) for f, n in zip(run.frames, run.numbers, strict=True)
                       if reader.receive(f) is not None]
            except RemoteProtocolError as exc:
                repl.stats.fetch_bad_answers += 1
                repl.carry_out(m, repl.state[m.index].core.gaps.bad_answer(peer.peer_id, exc))
                got = []
            for wire, no in got:
                if no < 0:
                    self._refuse(m, peer, wire)
                    continue
                repl.stats.fetch_answered += 1
                for mid in repl.ingest(m, peer, [no]):
                    repl.state[m.index].core.gaps.received(run.plan, mid)
        self._next(slot)

    def _refuse(self, m: Member, peer: Member, wire: bytes) -> None:
        """A forged event: refused by verification, counted, and the peer pays (the node's
        ``FetchedIngest.ingest``)."""
        actions, error = screen(verify_wires(self._spec, [wire]), peer.peer_id)
        assert error is not None, "a forged event passed verification"
        kind = next(a.kind for a in actions if isinstance(a, Rejected))
        self.sim.rejected(m, peer.index, RemoteProtocolError(error.reason, peer.peer_id, kind))
        self.repl.carry_out(m, [Penalize(peer.peer_id, penalty_of(kind))])

    def _end(self, slot: int) -> None:
        run = self._runs[slot]
        assert run is not None
        self._runs[slot] = None
        repl = self.repl
        m, st = self.sim.members[run.member], repl.state[run.member]
        repl.carry_out(m, st.core.fetched(run.plan))
        if m.online:
            repl.arm(m)
