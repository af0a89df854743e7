#!/usr/bin/env python3
"""Chaos run: a node's ordinary life on the emulated internet, on the default settings.

Real ``syncnode run`` processes in network namespaces (``tests/net``): public nodes on a shared
bridge and homes of one node each behind their own nftables-masquerade router, every node on the
default port 4001 with no tuned timer, everyone joined to the first public node (the other
public nodes first, then the homes). A seeded schedule (``--seed``; the same seed replays the
same schedule) applies one fault at a time, with quiet gaps between them, while a steady load
publishes on random live nodes:

- ``term_restart`` / ``kill_restart``: SIGTERM (waited for) or SIGKILL, a few seconds down,
  started again;
- ``burst_kill``: a burst of batch publishes on a node, SIGKILL a moment into it, restart;
- ``burst_term``: a whole burst, then SIGTERM right after it, restart;
- ``uplink_cut``: a home router's uplink down for a while, then up;
- ``burst``: a burst on a node;
- ``public_leave`` (once, at 45 % of the run): the first public node, the one everyone joined,
  stops for good; ``public_join`` (once, at 60 %): a new public node joins the second one.

After each restart, once the node is connected again (and 2 s, the smoke 0.5 s, for GossipSub's
heartbeat to graft it into the mesh), it publishes one probe event: the seconds until every other
live node that was in the group then stored it are ``restart_gossip_s`` (a restarted node's
gossip must not be taken for duplicates; a node that joined later took the probe in with its
first catch-up). After every fault the run waits until every live node holds every acknowledged
event.

Invariants and figures (the JSON keys):
- ``acked_lost``: acknowledged events missing from a live node's log at the end (target 0);
- ``unexpected_exits``: node processes that ended while the schedule meant them to run, plus
  log lines saying "unexpected" (target 0; the run restarts such a node and goes on);
- ``converge_s_max``: the longest wait, after a fault ended, until every live node held every
  acknowledged event (target <= 60);
- ``live_p99_ms``: p99 of (stored on a receiver - stored on the publisher) over the steady
  events published in quiet gaps, every live receiver (target <= 2,000);
- ``restart_gossip_s_max`` (target <= 2);
- ``catchup_after_restart_per_s``: after a burst cut short by SIGKILL (or ended by SIGTERM), the
  events a peer still lacked when the node came back, over the time the peer took to take them
  in by its own records (``tests/harness/catchup_timing.py``, as ``restart_catchup_bench.py``
  times it): from the start of the Recon session that brought the first of them (or the
  first's arrival, had gossip brought it) to the ``received_at`` of the last, waits between
  sessions included; the slowest peer (of those in the group before the restart) of the
  slowest such fault with at least ``catchup_min_events`` to take (target >= 5,000; null when
  no fault left that many).
  Each fault's ``catchup_span_s`` is the longest such time at a peer; ``catchup_start_s``, the
  longest wait from the node's return until a peer began taking the events in. The peers of a
  restarted node take its burst in side by side on the same cores: each fault also says how
  many did (``catchup_peers``), the events all of them took in over the time from the first
  one's start to the last one's end (``catchup_group_per_s``) and the share of the machine's
  CPU time that was busy meanwhile (``catchup_machine_busy``, from ``/proc/stat``);
- ``rss_slope_mib_per_h``: the steepest least-squares slope of a node process's resident memory
  over a life of at least ``rss_min_s`` after a warm-up (target <= 20);
- ``direct_fraction_end``: of the pairs of homes, the fraction connected directly at the end
  (target >= 0.9);
- ``faults``: the schedule as applied (kind, target, start and end seconds), each with its
  convergence, its probe's slowest arrival (``gossip_s``) and its burst's slowest catch-up rate
  (``catchup_per_s``), also printed as a table; ``rss_lives``: each judged process life's RSS at
  its ends, peak and slope.

When an invariant fails, or a full or quick run misses a target (``targets_missed``), the run
directory (every node's log) is kept and its path printed; otherwise it is removed.
``--quick`` runs 10 minutes; ``--smoke`` (for ``make test``) runs a miniature (2 public nodes,
2 homes, the four faults above once each, seconds apart) whose JSON goes to a temp file.
Full size writes docs/bench/chaos.json. Needs root and nftables (scripts/setup_net.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from benchjson import finish, smoke_path  # noqa: E402
from chaos_group import Group, Member  # noqa: E402
from machine_cpu import MachineCpu  # noqa: E402
from rss_slope import slope_mib_per_h  # noqa: E402

from tests.harness.catchup_timing import Timed, fetch_sessions, timed_catchup  # noqa: E402
from tests.net.netns import Internet  # noqa: E402

JSON_KEYS = ("acked_lost", "unexpected_exits", "converge_s_max", "live_p99_ms",
             "restart_gossip_s_max", "catchup_after_restart_per_s", "rss_slope_mib_per_h",
             "direct_fraction_end", "faults")
OUT = ROOT / "docs" / "bench" / "chaos.json"
KINDS = ("term_restart", "kill_restart", "burst_kill", "burst_term", "uplink_cut", "burst")


@dataclass(frozen=True)
class Plan:
    publics: int = 3
    homes: int = 5
    duration_s: float = 1800.0
    gap_s: tuple[float, float] = (20.0, 60.0)
    down_s: tuple[float, float] = (2.0, 10.0)
    cut_s: tuple[float, float] = (20.0, 60.0)
    kill_after_s: tuple[float, float] = (1.0, 3.0)
    burst: int = 5000
    batch: int = 500
    steady_every_s: float = 0.5
    converge_wait_s: float = 300.0
    direct_wait_s: float = 120.0
    catchup_min_events: int = 500
    first: tuple[str, ...] = KINDS  # faults applied before the seeded draws, in seeded order
    rss_warmup_s: float = 120.0
    rss_min_s: float = 600.0
    # How often the observer reads the nodes' logs and a wait asks again: events are stamped
    # by the nodes (received_at), so this only decides how soon a wait sees what happened.
    poll_s: float = 1.0
    # A steady event counts towards live_p99_ms if published this long before its quiet gap
    # ended (its deliveries fall in the gap too).
    live_margin_s: float = 5.0
    # A restarted node publishes its probe this long after it holds its connections again
    # (for GossipSub's heartbeat to graft it into the mesh).
    probe_after_s: float = 2.0


FULL = Plan()
QUICK = Plan(duration_s=600.0, rss_min_s=300.0)
# The smoke: the two first faults, the public node leaving and one joining, once each (its
# duration ends before any seeded draw), with gaps just long enough for a few steady events
# (one every 0.25 s, counted when published 0.5 s before the gap ends) and a cut of a second
# (the step, not the length, is what the smoke runs: its figures are not judged).
SMOKE = Plan(publics=2, homes=2, duration_s=5.0, gap_s=(1.0, 1.5), down_s=(0.5, 1.0),
             cut_s=(1.0, 1.5), kill_after_s=(0.3, 0.8), burst=400, batch=100,
             steady_every_s=0.25, converge_wait_s=120.0, direct_wait_s=30.0,
             catchup_min_events=50, rss_warmup_s=2.0, rss_min_s=8.0,
             first=("burst_kill", "uplink_cut"), poll_s=0.25, live_margin_s=0.5,
             probe_after_s=0.5)


@dataclass
class Fault:
    kind: str
    target: str
    start_s: float
    end_s: float = 0.0
    converge_s: float | None = None
    restart_wall_ms: int = 0  # when the restarted node's API answered again
    probe: str = ""  # the message id published after a restart
    gossip_s: float | None = None  # the probe's slowest arrival at a peer
    catchup_per_s: float | None = None  # the slowest peer's rate of taking in the burst
    catchup_span_s: float | None = None  # the longest time a peer took to take it in
    # The same burst taken in by every peer that lacked it, side by side: how many, the
    # events all of them took in over the time from the first one's start to the last one's
    # end, and how busy the machine's cores were meanwhile (1.0: all of them, all the time).
    catchup_peers: int = 0
    catchup_group_per_s: float | None = None
    catchup_machine_busy: float | None = None
    note: str = ""


class Chaos:
    def __init__(self, group: Group, plan: Plan, seed: int) -> None:
        self.group, self.plan = group, plan
        self.rng = random.Random(seed)
        self.load_rng = random.Random(seed + 1)
        self.faults: list[Fault] = []
        self.quiet: list[tuple[int, int]] = []  # wall ms windows with no fault active
        self.steady: set[str] = set()
        self.bursts: dict[int, list[str]] = {}  # fault index -> its acknowledged burst ids
        self.stop = threading.Event()
        self.counter = 0
        self.catchup_start_s: float | None = None  # slowest start of an after-restart catch-up
        self.cpu = MachineCpu()

    # -- background work --------------------------------------------------------------------

    def observer(self) -> None:
        while not self.stop.is_set():
            self.group.observe()
            self.stop.wait(self.plan.poll_s)

    def load(self) -> None:
        while not self.stop.wait(self.plan.steady_every_s):
            live = [m for m in self.group.live() if not m.gone]
            if not live:
                continue
            self.counter += 1
            acks = self.group.publish(self.load_rng.choice(live), [f"steady {self.counter}"])
            self.steady.update(a.message_id for a in acks)

    # -- faults -----------------------------------------------------------------------------

    def pick(self, homes_only: bool = False) -> Member:
        pool = self.group.homes() if homes_only else [
            m for m in self.group.live() if not m.gone]
        return self.rng.choice(sorted(pool, key=lambda m: m.name))

    def burst(self, member: Member, index: int, until: threading.Event | None = None) -> None:
        ids = self.bursts.setdefault(index, [])
        for start in range(0, self.plan.burst, self.plan.batch):
            if until is not None and until.is_set():
                return
            n = min(self.plan.batch, self.plan.burst - start)
            acks = self.group.publish(member, [f"burst {index} {start + i}" for i in range(n)])
            if not acks:
                return  # the node went down under it
            ids.extend(a.message_id for a in acks)

    def restart(self, fault: Fault, member: Member, how: str) -> None:
        try:
            before = len(self.group.connections(member)) if member.up else 1
        except Exception:  # not answering: it is about to go down anyway
            before = 1
        self.group.stop(member, how)
        time.sleep(self.rng.uniform(*self.plan.down_s))
        self.group.start(member)
        fault.restart_wall_ms = int(time.time() * 1000)
        want = max(1, min(before, len(self.group.live()) - 1))
        _wait(lambda: len(self.group.connections(member)) >= want, 60, self.plan.poll_s)
        time.sleep(self.plan.probe_after_s)
        acks = self.group.publish(member, [f"probe after {fault.kind} of {member.name}"])
        fault.probe = acks[0].message_id if acks else ""

    def apply(self, kind: str) -> Fault:
        group, rng, index = self.group, self.rng, len(self.faults)
        if kind == "uplink_cut":
            member = self.pick(homes_only=True)
        elif kind == "public_leave":
            member = group.members["p0"]
        elif kind == "public_join":
            member = group.add_public()
        else:
            member = self.pick()
        fault = Fault(kind, member.name, round(group.elapsed(), 1))
        if kind in ("term_restart", "kill_restart"):
            self.restart(fault, member, "term" if kind == "term_restart" else "kill")
        elif kind == "burst_kill":
            cut = threading.Event()
            worker = threading.Thread(target=self.burst, args=(member, index, cut))
            worker.start()
            time.sleep(rng.uniform(*self.plan.kill_after_s))
            group.stop(member, "kill")
            cut.set()
            worker.join()
            self.restart(fault, member, "kill")  # already down: the restart starts it
        elif kind == "burst_term":
            self.burst(member, index)
            self.restart(fault, member, "term")
        elif kind == "burst":
            self.burst(member, index)
        elif kind == "uplink_cut":
            assert member.host.home is not None
            group.internet.set_uplink(member.host.home, False)
            time.sleep(rng.uniform(*self.plan.cut_s))
            group.internet.set_uplink(member.host.home, True)
        elif kind == "public_leave":
            group.stop(member, "term")
            member.gone = True
        elif kind == "public_join":
            group.start(member)
            group.join(member, group.members["p1"])
        fault.end_s = round(group.elapsed(), 1)
        self.faults.append(fault)
        return fault

    def converge(self, fault: Fault) -> None:
        """Wait until every live node holds every event acknowledged so far."""
        with self.group.lock:
            ids = {a.message_id for a in self.group.acks}
        waited = _wait(lambda: self.group.holds(self.group.live(), ids),
                       self.plan.converge_wait_s, self.plan.poll_s)
        fault.converge_s = None if waited is None else round(
            self.group.elapsed() - fault.end_s, 1)

    def run(self) -> None:
        plan, group = self.plan, self.group
        order = list(plan.first)
        self.rng.shuffle(order)  # each of these early on, then seeded draws
        begin = group.elapsed()
        fixed = [("public_leave", begin + 0.45 * plan.duration_s),
                 ("public_join", begin + 0.6 * plan.duration_s)]
        while group.elapsed() - begin < plan.duration_s or fixed or order:
            start = int(time.time() * 1000)
            time.sleep(self.rng.uniform(*plan.gap_s))
            self.quiet.append((start, int(time.time() * 1000)))
            if fixed and group.elapsed() >= fixed[0][1]:
                kind = fixed.pop(0)[0]
            elif order:
                kind = order.pop()
            else:
                kind = self.rng.choice(KINDS)
            fault = self.apply(kind)
            print(f"{fault.start_s:7.1f}s {kind:<13} {fault.target:<4} "
                  f"({fault.end_s - fault.start_s:.1f} s)", file=sys.stderr, flush=True)
            self.converge(fault)


# -- figures ---------------------------------------------------------------------------------

def _wait(condition: Callable[[], bool], timeout: float, step: float = 1.0) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if condition():
                return time.monotonic() - start
        except Exception:  # a node restarting: ask again
            pass
        time.sleep(step)
    return None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def origin_ms(group: Group, message_id: str) -> int | None:
    """When the publisher stored the event (its own log's received_at)."""
    for ack in group.acks:
        if ack.message_id == message_id:
            return group.members[ack.member].seen.get(message_id)
    return None


def live_latencies(chaos: Chaos) -> list[tuple[str, str, int, int]]:
    """(publisher, receiver, published at ms, latency ms) of the steady events of quiet gaps."""
    group, out = chaos.group, []
    publisher = {a.message_id: a.member for a in group.acks}
    for message_id in chaos.steady:
        sender = group.members[publisher[message_id]]
        t0 = sender.seen.get(message_id)
        margin_ms = chaos.plan.live_margin_s * 1000
        window = next(((lo, hi) for lo, hi in chaos.quiet if lo <= (t0 or 0) <= hi - margin_ms),
                      None)
        if t0 is None or window is None:
            continue
        # Receivers that ran through the whole gap (not one that joined or came back in it).
        out += [(sender.name, m.name, t0, m.seen[message_id] - t0) for m in group.live()
                if m is not sender and message_id in m.seen and m.since_ms <= window[0]]
    return out


def live_p99(chaos: Chaos) -> float | None:
    p = _percentile([float(v[3]) for v in live_latencies(chaos)], 0.99)
    return None if p is None else round(p, 1)


def slow_pairs(chaos: Chaos, over_ms: int = 2000) -> dict[str, int]:
    """How many quiet-gap deliveries took longer than ``over_ms``, per publisher->receiver."""
    counts: dict[str, int] = {}
    for sender, receiver, _, ms in live_latencies(chaos):
        if ms > over_ms:
            counts[f"{sender}->{receiver}"] = counts.get(f"{sender}->{receiver}", 0) + 1
    return counts


def restart_gossip(chaos: Chaos) -> float | None:
    worst: float | None = None
    for fault in chaos.faults:
        if not fault.probe:
            continue
        t0 = origin_ms(chaos.group, fault.probe)
        # A node that joined the group after the probe took it in with its first catch-up,
        # not by the restarted node's gossip.
        others = [m for m in chaos.group.live()
                  if m.name != fault.target and t0 is not None and m.joined_ms <= t0]
        if t0 is None or not others:
            continue
        arrivals = [m.seen.get(fault.probe) for m in others]
        s = max((a - t0) / 1000 if a is not None else float("inf") for a in arrivals)
        fault.gossip_s = round(s, 2)
        worst = s if worst is None else max(worst, s)
    return None if worst is None else round(worst, 2)


def catchup_rate(chaos: Chaos) -> float | None:
    slowest: float | None = None
    for index, ids in chaos.bursts.items():
        fault = chaos.faults[index]
        if not fault.restart_wall_ms:
            continue
        group: list[Timed] = []
        for peer in chaos.group.live():
            if peer.name == fault.target or peer.joined_ms > fault.restart_wall_ms:
                continue  # (one that joined later took the events in as a fresh node)
            late = [peer.seen[i] for i in ids if peer.seen.get(i, 0) >= fault.restart_wall_ms]
            missing = sum(1 for i in ids if i not in peer.seen)
            if missing or len(late) < chaos.plan.catchup_min_events:
                continue
            # By the peer's own records: from the start of the Recon session that brought the
            # first to the last one's commit (tests.harness.catchup_timing).
            timed = timed_catchup(late, fetch_sessions(peer.node.stderr_path))
            if timed is None or timed.rate is None:
                continue
            group.append(timed)
            slowest = timed.rate if slowest is None else min(slowest, timed.rate)
            fault.catchup_per_s = min(timed.rate, fault.catchup_per_s or timed.rate)
            fault.catchup_span_s = round(max(timed.seconds, fault.catchup_span_s or 0.0), 2)
            start = (timed.start_ms - fault.restart_wall_ms) / 1000
            chaos.catchup_start_s = max(chaos.catchup_start_s or 0.0, round(start, 2))
        if group:
            first, last = min(t.start_ms for t in group), max(t.last_ms for t in group)
            fault.catchup_peers = len(group)
            fault.catchup_group_per_s = round(sum(t.events for t in group)
                                              / max((last - first) / 1000, 0.001))
            fault.catchup_machine_busy = chaos.cpu.busy_fraction(first, last)
    return slowest


def rss_lives(group: Group, plan: Plan) -> list[dict[str, Any]]:
    """Each process life long enough to judge: its node, span, RSS at the ends and peak (MiB),
    and its slope."""
    out = []
    for member in group.members.values():
        for life in member.rss:
            points = [(t, v) for t, v in life if life and t >= life[0][0] + plan.rss_warmup_s]
            slope = slope_mib_per_h(points)
            if slope is None or points[-1][0] - points[0][0] < plan.rss_min_s:
                continue
            out.append({"node": member.name, "from_s": round(points[0][0]),
                        "to_s": round(points[-1][0]), "first_mib": round(points[0][1], 1),
                        "last_mib": round(points[-1][1], 1),
                        "max_mib": round(max(v for _, v in points), 1),
                        "slope_mib_per_h": round(slope, 1)})
    return out


def rss_slope(lives: list[dict[str, Any]]) -> float | None:
    """The steepest life's slope."""
    return max((life["slope_mib_per_h"] for life in lives), default=None)


def direct_fraction(group: Group, wait_s: float, poll_s: float) -> float | None:
    homes = [m for m in group.homes() if m.up]
    pairs = [(a, b) for i, a in enumerate(homes) for b in homes[i + 1:]]
    if not pairs:
        return None

    def fraction() -> float:
        direct = 0
        for a, b in pairs:
            paths = {**group.connections(a)}
            back = group.connections(b)
            if paths.get(b.node.peer_id) == "direct" or back.get(a.node.peer_id) == "direct":
                direct += 1
        return direct / len(pairs)

    _wait(lambda: fraction() == 1.0, wait_s, step=2 * poll_s)  # each pass asks every home
    return round(fraction(), 3)


def measure(chaos: Chaos, plan: Plan) -> dict[str, Any]:
    group = chaos.group
    with group.lock:
        acked = {a.message_id for a in group.acks}

    def caught_up() -> bool:  # the observer has stopped: read the logs here
        for member in group.live():
            with contextlib.suppress(Exception):
                group.read_new(member)
        return group.holds(group.live(), acked)

    final_wait = _wait(caught_up, plan.converge_wait_s, plan.poll_s)
    lost = {i for m in group.live() for i in acked - m.seen.keys()}
    converged = [f.converge_s for f in chaos.faults]
    unexpected = group.unexpected_log_lines()
    lives = rss_lives(group, plan)
    return {
        "acked_lost": len(lost),
        "unexpected_exits": len(group.exits) + len(unexpected),
        "converge_s_max": (None if final_wait is None or None in converged
                           else max([0.0, *(c for c in converged if c is not None)])),
        "live_p99_ms": live_p99(chaos),
        "restart_gossip_s_max": restart_gossip(chaos),
        "catchup_after_restart_per_s": catchup_rate(chaos),
        "rss_slope_mib_per_h": rss_slope(lives),
        "direct_fraction_end": direct_fraction(group, plan.direct_wait_s, plan.poll_s),
        "faults": [asdict(f) for f in chaos.faults],
        "catchup_start_s": chaos.catchup_start_s,
        "acked": len(acked),
        "live_deliveries": len(live_latencies(chaos)),
        "live_slow_pairs": slow_pairs(chaos),
        "rss_lives": lives,
        "exits": [asdict(e) for e in group.exits],
        "unexpected_lines": unexpected[:20],
        "nodes": len(group.members),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


TARGETS: dict[str, tuple[str, float]] = {  # key: (at most / at least, bound) at full size
    "converge_s_max": ("<=", 60), "live_p99_ms": ("<=", 2000), "restart_gossip_s_max": ("<=", 2),
    "catchup_after_restart_per_s": (">=", 5000), "rss_slope_mib_per_h": ("<=", 20),
    "direct_fraction_end": (">=", 0.9)}


def missed(result: dict[str, Any]) -> list[str]:
    """The targets a full or quick run missed (a smoke is too small to judge them)."""
    out = []
    for key, (op, bound) in TARGETS.items():
        value = result.get(key)
        if value is None or (value > bound if op == "<=" else value < bound):
            out.append(f"{key}={value} (target {op} {bound})")
    return out


def violated(result: dict[str, Any]) -> list[str]:
    """The invariants every run must hold, whatever its size."""
    bad = []
    if result["acked_lost"]:
        bad.append(f"acked_lost={result['acked_lost']}")
    if result["unexpected_exits"]:
        bad.append(f"unexpected_exits={result['unexpected_exits']}")
    if result["converge_s_max"] is None:
        bad.append("a fault's convergence never came")
    return bad


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="10 minutes of faults")
    size.add_argument("--smoke", action="store_true", help="a miniature, for make test")
    parser.add_argument("--seed", type=int, default=1, help="the fault schedule's seed")
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    args = parser.parse_args(argv)
    plan = SMOKE if args.smoke else QUICK if args.quick else FULL
    out = smoke_path("chaos") if args.smoke else OUT
    base = Path(tempfile.mkdtemp(prefix=f"syncnode-chaos-{args.seed}-"))
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    with Internet() as internet:
        group = Group(internet, base, plan.publics, plan.homes)
        chaos = Chaos(group, plan, args.seed)
        try:
            members = list(group.members.values())
            with ThreadPoolExecutor(len(members)) as pool:
                list(pool.map(group.start, members))
            first = group.members["p0"]
            # The other public nodes join first, then the homes at once: a home's first peer
            # exchange (on connecting) then names the public nodes. Joined the other way, a
            # home learns of them at its next exchange, a few seconds later while it holds
            # few connections (sync.membership.px_schedule), which the smoke's faults, 2-3 s
            # apart, may not wait for.
            for joining in ([m for m in members[1:] if m.host.public],
                            [m for m in members[1:] if not m.host.public]):
                with ThreadPoolExecutor(max(1, len(joining))) as pool:
                    list(pool.map(lambda m: group.join(m, first), joining))
            threads = [threading.Thread(target=chaos.observer, daemon=True),
                       threading.Thread(target=chaos.load, daemon=True)]
            for thread in threads:
                thread.start()
            chaos.cpu.start()
            chaos.run()
            chaos.stop.set()
            for thread in threads:
                thread.join(timeout=30)
            result = measure(chaos, plan)
        finally:
            chaos.stop.set()
            chaos.cpu.stop()
            group.kill_all()
    result.update(seed=args.seed, seconds=round(time.monotonic() - started),
                  load_avg_start=round(load_start, 2), cores=os.cpu_count())
    bad = violated(result)
    short = [] if args.smoke else missed(result)
    result["targets_missed"] = short
    print(f"{'fault':<14}{'node':<6}{'start s':>9}{'took s':>8}{'converge s':>11}"
          f"{'gossip s':>10}{'catch-up/s':>11}{'peers':>6}{'group/s':>9}{'cpu busy':>9}",
          file=sys.stderr)
    for f in result["faults"]:
        print(f"{f['kind']:<14}{f['target']:<6}{f['start_s']:>9}"
              f"{f['end_s'] - f['start_s']:>8.1f}{_cell(f['converge_s']):>11}"
              f"{_cell(f['gossip_s']):>10}{_cell(f['catchup_per_s']):>11}"
              f"{f['catchup_peers'] or '':>6}{_cell(f['catchup_group_per_s']):>9}"
              f"{_cell(f['catchup_machine_busy']):>9}", file=sys.stderr)
    print(f"{'seed':<28}{args.seed}", file=sys.stderr)
    for key in JSON_KEYS[:-1]:
        print(f"{key:<28}{result[key]}", file=sys.stderr)
    print(f"{'faults':<28}{len(result['faults'])}", file=sys.stderr)
    if short:
        print(f"targets missed: {'; '.join(short)}", file=sys.stderr)
    if bad or short or args.keep:
        print(f"invariants violated: {', '.join(bad) or 'none'}; logs kept in {base}",
              file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)
    optional = ("catchup_after_restart_per_s", "rss_slope_mib_per_h") if args.smoke else ()
    return finish(result, JSON_KEYS, out, optional=optional)


if __name__ == "__main__":
    sys.exit(main())
