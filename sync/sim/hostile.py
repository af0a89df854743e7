"""Hostile members: the attacks of docs/security.md, run by members the honest ones cannot tell
apart (validly signed, in the mesh, answering Recon).

Behaviours (``Scenario.hostile``, one member each, chosen by the run's seed):

- ``clock``: poisoned clocks. Validly signed events stamped an hour ahead of the attacker's
  wall clock (beyond ``max_lamport_ahead_ms``), and one at the largest Lamport time a varint
  holds. Honest members must refuse them and keep their own clocks bounded.
- ``amplify``: repair-request amplification. Fresh signed events of its own, each carrying
  signed repair requests for honest messages, and honest members' messages replayed with
  unsigned requests attached. The repair budgets must bound what honest members rebroadcast.
- ``acks``: forged acknowledgements. A full bloom filter (every bit set, so it "contains"
  every id) on its own signed messages and, unsigned, on replayed honest messages: nothing it
  never received may count as acknowledged, and nothing acknowledged may be lost.
- ``withhold``: withheld keys. It reconciles like anyone (its key store holds what it has)
  but never serves the events a Recon session found its peer lacks; the peer backs it off and
  gets them elsewhere. Asked for events by id, it answers nothing.
- ``junk``: forged fetch answers. It answers every fetch-by-id with a forged copy (one bit
  flipped) of each event asked that it holds, and every other answer with one frame more
  than ids were asked (sync/sim/fetch.py); the asker refuses and counts them, the peer pays,
  and the next peer is asked.

The runner checks the invariants (honest input never refused, honest clocks bounded, repair
answers within budget, convergence of the honest members); this module only attacks and
counts what it sent (``Stats.hostile_bytes``).
"""

from __future__ import annotations

from sync.sds import HistoryRef, encode_event, transmission_suffix
from sync.sds.bloom import BloomParams
from sync.sim.world import Member, World

__all__ = ["BEHAVIOURS", "HOSTILE", "Hostile"]

BEHAVIOURS = ("clock", "amplify", "acks", "withhold", "junk")
#: Behaviours that only answer (nothing scheduled of their own).
_PASSIVE = ("withhold", "junk")
#: Heap kind of an attack step (the runner's kinds are below 20, replication's 20-29).
HOSTILE = 30
#: Seconds between two attack steps of one hostile member.
PERIOD = 1.0
#: The forger sends its filters often, so that they reach senders before any honest copy.
ACK_PERIOD = 0.2
_AHEAD_MS = 3_600_000
_REQUESTS = 8


class Hostile:
    def __init__(self, sim: World) -> None:
        self.sim = sim
        self.behaviour: dict[int, str] = {}
        self._count = 0

    def recruit(self) -> None:
        """Turn one member per behaviour hostile (never member 0: some honest member must be
        there from the start) and schedule its attacks."""
        sim = self.sim
        names = sim.sc.hostile
        unknown = [n for n in names if n not in BEHAVIOURS]
        if unknown:
            raise ValueError(f"unknown hostile behaviour(s) {unknown}; known: {BEHAVIOURS}")
        pool = list(range(1, len(sim.members)))
        chosen = sim.rng.sample(pool, min(len(names), len(pool)))
        for index, name in zip(chosen, names, strict=False):
            m = sim.members[index]
            m.honest = False
            self.behaviour[index] = name
            if name not in _PASSIVE:
                sim.push(sim.rng.uniform(0.5, 1.5), HOSTILE, index)

    def withholds(self, m: Member) -> bool:
        return self.behaviour.get(m.index) == "withhold"

    def handle(self, kind: int, who: int, payload: int) -> None:
        sim = self.sim
        m = sim.members[who]
        if kind != HOSTILE or sim.now >= sim.sc.duration:
            return
        if m.online and not m.gone:
            name = self.behaviour[who]
            if name == "clock":
                self._clock(m)
            elif name == "amplify":
                self._amplify(m)
            elif name == "acks":
                self._acks(m)
        sim.push(sim.now + (ACK_PERIOD if self.behaviour[who] == "acks" else PERIOD),
                 HOSTILE, who)

    # -- the attacks --------------------------------------------------------------------------
    def _wall_ms(self, m: Member) -> int:
        return int((self.sim.now + m.clock) * 1000)

    def _send(self, m: Member, wire: bytes) -> None:
        self.sim.stats.hostile_bytes += len(wire)
        self.sim.stats.hostile_messages += 1
        self.sim.broadcast(m, wire)

    def _content(self) -> bytes:
        self._count += 1
        return b"hostile %d " % self._count + self.sim.rng.randbytes(32)

    def _clock(self, m: Member) -> None:
        sim = self.sim
        lamport = self._wall_ms(m) + _AHEAD_MS
        if self._count % 5 == 4:
            lamport = (1 << 64) - 1  # the largest a uint64 field holds
        ev = encode_event(sim.channel, m.peer_id, lamport, (), self._content(), m.key)
        self._send(m, ev.wire + transmission_suffix(None, None, ()))

    def _honest_refs(self, n: int) -> tuple[HistoryRef, ...]:
        sim = self.sim
        if not sim.ids:
            return ()
        picks = [sim.rng.randrange(len(sim.ids)) for _ in range(n)]
        return tuple(HistoryRef(sim.ids[i], None, sim.senders[i]) for i in picks)

    def _amplify(self, m: Member) -> None:
        sim = self.sim
        refs = self._honest_refs(_REQUESTS)
        if not refs:
            return
        ev = encode_event(sim.channel, m.peer_id, self._wall_ms(m), (), self._content(), m.key)
        self._send(m, ev.wire + transmission_suffix(None, None, refs, channel_id=sim.channel,
                                                    signing_key=m.key,
                                                    message_id=ev.message_id))
        # Somebody else's message replayed with requests it never signed.
        victim = sim.rng.randrange(len(sim.ids))
        self._send(m, sim.wires[sim.ids[victim]] + transmission_suffix(None, None, refs))

    def _acks(self, m: Member) -> None:
        sim = self.sim
        params: BloomParams = m.channel.setup.profile.bloom_params
        full = b"\xff" * ((params.bits + 7) // 8)
        ev = encode_event(sim.channel, m.peer_id, self._wall_ms(m), (), b"", m.key)
        self._send(m, ev.wire + transmission_suffix(full, params, (), channel_id=sim.channel,
                                                    signing_key=m.key))
        if sim.ids:
            victim = sim.rng.randrange(len(sim.ids))
            self._send(m, sim.wires[sim.ids[victim]] + transmission_suffix(full, params, ()))
