#!/usr/bin/env python3
"""Network benchmark: real ``syncnode run`` processes on an emulated internet (tests/net).

Measurements (docs/network.md "Measured"):

1. ``survives_first_loss``: scenario 1 (four loopback nodes, each joined to the first; the first
   stops; an event published on the second must reach the other two) and scenario 2's loss of
   both public nodes (an event published on a home node must reach every home node) both keep
   every log converging.
2. ``mesh_s``: on the emulated internet (2 public nodes, 3 homes x 2 nodes behind nftables NAT),
   after the group meshed, a new home node is given one public node's address: seconds until it
   holds connections to >= 5 others (target <= 10; null if never within the wait).
3. ``direct_fraction``: of the home-to-home pairs across NATs, the fraction connected directly
   (hole-punched) ``direct_wait_s`` after the start (60 s; target >= 0.9). Two nodes of one home
   that met through a remote peer stay relayed (docs/security.md "Address scope").
4. ``heal_s``: one home router's uplink goes down for ``partition_s`` (60 s) while the public
   nodes run (issue 27's scenario 3), both sides publish, the uplink returns: seconds until every
   home log is identical (target <= 10). ``direct_again_s``: then, seconds until the home nodes'
   direct connections join them all again (the cut-off home re-punches through the relays),
   before scenario 2's loss of the public nodes. ``direct_after_heal_s``: seconds from the
   uplink's return until every pair of the cut-off home's nodes with a node behind another NAT
   is direct again (target <= 60; null if not within the wait; the smoke has one such pair).
   Liveness runs at its defaults here (pings every 5 s, 3 failures close), the other timers as
   ``tests/net/world.py``'s ``NET_ENV``.
5. ``relay_bytes_per_event``: two home nodes with hole punching off, connected only through a
   relay: bytes the relay forwarded per event published on one and stored by the other.
6. ``inbound_after_churn_ok``: one identity attempts 1,000 connect/disconnect cycles (4
   parallel workers; ``churn_cycles_attempted``) against a node, which upgrades some
   (``churn_cycles_upgraded``) and refuses the rest by its per-identity rate limit
   (``churn_refused_by_node``, its ``p2p_inbound_refused_total``); then a fresh node joins it
   and must be among the victim's connected peers.

``--quick`` (under 5 minutes) shortens nothing that has a target except the waits; ``--smoke``
(for ``make test``) runs the internet steps on a miniature (1 public node, 2 homes of one node,
3 s partition, short waits, no newcomer) and 20 churn cycles, leaves out steps 1 and 5 (their
keys, and ``mesh_s``, are null),
writes its JSON to a temp file and exits 1 when a step failed to run.
The last line of stdout is the JSON result, also written to docs/bench/net.json (full/quick).
Needs root (network namespaces) and nftables (scripts/setup_net.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent.parent
#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("mesh_s", "direct_fraction", "survives_first_loss", "heal_s",
             "direct_after_heal_s", "inbound_after_churn_ok", "relay_bytes_per_event")
sys.path[:0] = [str(ROOT)]

from tests.harness.cluster import channel_log, metric, publish_many, start_node  # noqa: E402
from tests.harness.hostile_conns import churn_counts  # noqa: E402
from tests.harness.procs import NodeProcess  # noqa: E402
from tests.net.netns import Internet  # noqa: E402
from tests.net.nodes import NetNode  # noqa: E402
from tests.net.world import (  # noqa: E402
    NET_ENV,
    World,
    build_world,
    direct_group,
    logs_identical,
)

OUT = ROOT / "docs" / "bench" / "net.json"
CHANNEL = "general"


@dataclass(frozen=True)
class Plan:
    publics: int = 2
    homes: int = 3
    per_home: int = 2
    mesh_wait_s: float = 60.0
    direct_wait_s: float = 60.0
    partition_s: float = 60.0
    converge_wait_s: float = 120.0
    relay_events: int = 200
    churn_cycles: int = 1000
    mesh_target: int = 5
    # direct_fraction is read direct_wait_s after the start (a point in a node's life); the
    # smoke reads it as soon as every pair is direct instead (its figure is not judged).
    direct_early: bool = False


FULL = Plan()
QUICK = Plan(mesh_wait_s=40.0, converge_wait_s=90.0, relay_events=100)
SMOKE = Plan(publics=1, homes=2, per_home=1, mesh_wait_s=15.0, direct_wait_s=10.0,
             partition_s=3.0, converge_wait_s=30.0, relay_events=10, churn_cycles=20,
             mesh_target=2, direct_early=True)


def wait_until(condition: Callable[[], bool], timeout: float, step: float = 0.5) -> float | None:
    """Seconds until ``condition()`` held (None if it never did within ``timeout``)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if condition():
                return round(time.monotonic() - start, 2)
        except Exception:  # a node still starting or just stopped: ask again
            pass
        time.sleep(step)
    return None


def connections(node: NodeProcess) -> int:
    return len(node.get("/v1/peers")["connected"])


def load_avg() -> float:
    return os.getloadavg()[0]


# -- 1. scenario 1 on loopback -------------------------------------------------------------

def loopback_loss(base: Path, plan: Plan) -> bool:
    nodes = [start_node(base, "l0")]
    try:
        nodes += [start_node(base, f"l{i}", bootstrap=nodes[:1]) for i in range(1, 4)]
        wait_until(lambda: all(connections(n) >= 3 for n in nodes), plan.mesh_wait_s)
        nodes[0].kill()
        publish_many(nodes[1], CHANNEL, ["after-first-loss"])
        rest = nodes[1:]
        return wait_until(lambda: logs_identical(rest, CHANNEL, 1), plan.converge_wait_s) \
            is not None
    finally:
        for node in nodes:
            node.kill()


# -- 2-4. the emulated internet ------------------------------------------------------------

def join_one_public(world: World) -> None:
    first = world.public[0]
    for i, node in enumerate(world.nodes[1:]):
        target = world.public[i % len(world.public)] if node not in world.public else first
        node.join(target.address)


def direct_fraction(world: World) -> tuple[float, int, int]:
    pairs = world.home_pairs_across_nats()
    direct = sum(1 for a, b in pairs if world.paths(a).get(b.peer_id) == "direct")
    return (round(direct / len(pairs), 3) if pairs else 0.0), direct, len(pairs)


def internet_steps(base: Path, plan: Plan, result: dict[str, Any]) -> None:
    with Internet() as internet, build_world(internet, base / "inet", publics=plan.publics,
                                             homes=plan.homes, per_home=plan.per_home) as world:
        started = time.monotonic()
        join_one_public(world)
        want = min(plan.mesh_target, len(world.nodes) - 1)
        result["group_mesh_s"] = wait_until(
            lambda: all(connections(n) >= want for n in world.nodes), plan.mesh_wait_s)
        left = max(0.0, plan.direct_wait_s - (time.monotonic() - started))
        if plan.direct_early:
            wait_until(lambda: direct_fraction(world)[0] == 1.0, left)
        else:
            time.sleep(left)
        fraction, direct, pairs = direct_fraction(world)
        result.update(direct_fraction=fraction, direct_pairs=f"{direct}/{pairs}")
        # A new member given one address (not in the smoke: one more node to start).
        home = internet.add_home_host(0) if plan.churn_cycles >= 100 else None
        if home is None:
            result["mesh_s"] = None
        else:
            newcomer = NetNode(home, base / "inet" / "new", port=4100, env=NET_ENV).start()
            try:
                newcomer.join(world.public[0].address)
                result["mesh_s"] = wait_until(lambda: connections(newcomer) >= want,
                                              plan.mesh_wait_s)
            finally:
                newcomer.kill()
        # Scenario 3 as the issue writes it: a home's uplink down while the public nodes run.
        result["heal_s"], healed_at = partition_heal(internet, world, plan, "with", 10)
        cut_home = world.home[0].host.home
        cut_pairs = [(a, b) for a, b in world.home_pairs_across_nats()
                     if cut_home in (a.host.home, b.host.home)]
        again = wait_until(lambda: all(world.paths(a).get(b.peer_id) == "direct"
                                       for a, b in cut_pairs),
                           plan.direct_wait_s + plan.converge_wait_s)
        result["direct_after_heal_s"] = (
            None if again is None else round(time.monotonic() - healed_at, 2))
        # Scenario 2's loss of every public node, once the home nodes' direct connections join
        # them all again (the cut-off home came back through relays: it must re-punch first).
        result["direct_again_s"] = wait_until(
            lambda: direct_group(world), plan.direct_wait_s + plan.converge_wait_s)
        for node in world.public:
            node.kill()
        publish_many(world.home[0], CHANNEL, ["after-public-loss"])
        result["survives_public_loss"] = wait_until(
            lambda: logs_identical(world.home, CHANNEL, 11), plan.converge_wait_s) is not None


def partition_heal(internet: Internet, world: World, plan: Plan, tag: str,
                   expected: int) -> tuple[float | None, float]:
    """One home router's uplink down for ``partition_s``, both sides publish, the uplink
    returns: seconds until every home log holds ``expected`` events, identical (and the
    monotonic time the uplink returned)."""
    cut = world.home[0]
    other = next(n for n in world.home if n.host.home != cut.host.home)
    internet.set_uplink(cut.host.home or 0, up=False)
    publish_many(cut, CHANNEL, [f"cut-in-{tag}-{i}" for i in range(5)])
    publish_many(other, CHANNEL, [f"cut-out-{tag}-{i}" for i in range(5)])
    time.sleep(plan.partition_s)
    internet.set_uplink(cut.host.home or 0, up=True)
    healed_at = time.monotonic()
    return wait_until(lambda: logs_identical(world.home, CHANNEL, expected),
                      plan.converge_wait_s), healed_at


def relay_cost(base: Path, plan: Plan) -> float | None:
    """Bytes a relay forwards per event between two home nodes that may not punch."""
    env = {"SYNCNODE_REACHABILITY_HOLE_PUNCH": "false"}
    with Internet() as internet, build_world(internet, base / "relay", publics=1, homes=2,
                                             per_home=1, env=env) as world:
        relay = world.public[0]
        a, b = world.home
        for node in world.home:
            node.join(relay.address)
        if wait_until(lambda: all(n.get("/v1/status")["network"]["relayed_addrs"]
                                  for n in world.home), 60) is None:
            return None
        joined = a.cli("join", b.get("/v1/status")["network"]["relayed_addrs"][0])
        if joined.returncode != 0:
            return None
        wait_until(lambda: len(b.get("/v1/peers")["connected"]) >= 2, 30)
        before = metric(relay, "relay_forwarded_bytes_total")
        publish_many(a, CHANNEL, [f"relayed-{i}-" + "x" * 200 for i in range(plan.relay_events)])
        if wait_until(lambda: len(channel_log(b, CHANNEL)) >= plan.relay_events, 120) is None:
            return None
        time.sleep(2)  # let acknowledgements and the next sync message pass too
        return round((metric(relay, "relay_forwarded_bytes_total") - before)
                     / plan.relay_events, 1)


def churn_then_join(base: Path, plan: Plan) -> dict[str, Any]:
    """One identity attempts ``churn_cycles`` connect/disconnect cycles (4 at a time): each
    attempt is a TCP connection and a Noise handshake; the node upgrades some and refuses the
    rest (per-identity rate limit, ``p2p_inbound_refused_total``). Then a new honest node
    joins: ``inbound_after_churn_ok`` when the join succeeds and the victim holds it."""
    victim = start_node(base, "victim")
    try:
        attempted, upgraded = trio.run(churn_counts, victim.listen_addrs[0],
                                       plan.churn_cycles, 4)
        refused = metric(victim, "p2p_inbound_refused_total")
        fresh = start_node(base, "fresh")
        try:
            joined = fresh.cli("join", victim.listen_addrs[0])
            ok = joined.returncode == 0 and fresh.peer_id in {
                p["peer_id"] for p in victim.get("/v1/peers")["connected"]}
        finally:
            fresh.kill()
    finally:
        victim.kill()
    return {"inbound_after_churn_ok": ok, "churn_cycles_attempted": attempted,
            "churn_cycles_upgraded": upgraded, "churn_refused_by_node": int(refused)}


def table(result: dict[str, Any]) -> str:
    rows = [("mesh_s", "<= 10"), ("group_mesh_s", ""), ("direct_fraction", ">= 0.9"),
            ("direct_pairs", ""), ("survives_first_loss", "true"), ("survives_loopback_loss", ""),
            ("survives_public_loss", ""), ("heal_s", "<= 10"),
            ("direct_again_s", ""), ("direct_after_heal_s", "<= 60"), ("partition_s", ""),
            ("relay_bytes_per_event", ""), ("inbound_after_churn_ok", "true"),
            ("churn_cycles_attempted", ""), ("churn_cycles_upgraded", ""),
            ("churn_refused_by_node", "")]
    lines = [f"{'figure':<26}{'measured':>14}  target"]
    lines += [f"{k:<26}{result.get(k)!s:>14}  {t}" for k, t in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="shorter waits (under 5 minutes)")
    mode.add_argument("--smoke", action="store_true", help="a miniature, for make test")
    parser.add_argument("--out", type=Path, help="where to write the JSON")
    args = parser.parse_args()
    plan = SMOKE if args.smoke else QUICK if args.quick else FULL
    out = args.out or (Path(tempfile.mkstemp(suffix=".json")[1]) if args.smoke else OUT)
    base = Path(tempfile.mkdtemp(prefix="net-bench-"))
    result: dict[str, Any] = {"mode": "smoke" if args.smoke else "quick" if args.quick
                              else "full", "partition_s": plan.partition_s,
                              "load_avg_1m_start": round(load_avg(), 2)}
    started = time.monotonic()
    failed: list[str] = []
    steps: list[tuple[str, Callable[[], None]]] = [
        ("loopback", lambda: result.update(survives_loopback_loss=loopback_loss(base, plan))),
        ("internet", lambda: internet_steps(base, plan, result)),
        ("relay", lambda: result.update(relay_bytes_per_event=relay_cost(base, plan))),
        ("churn", lambda: result.update(churn_then_join(base, plan))),
    ]
    if args.smoke:
        steps = [s for s in steps if s[0] in ("internet", "churn")]
    try:
        for name, step in steps:
            t0 = time.monotonic()
            try:
                step()
            except Exception as exc:  # report and go on: the other figures still count
                failed.append(name)
                print(f"step {name} failed: {exc!r}", file=sys.stderr)
            print(f"step {name}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result.setdefault("survives_loopback_loss", None)
    result["survives_first_loss"] = bool(result.get("survives_loopback_loss")
                                         and result.get("survives_public_loss"))
    result.setdefault("mesh_s", None)
    result.setdefault("direct_fraction", None)
    result.setdefault("heal_s", None)
    result.setdefault("relay_bytes_per_event", None)
    result.setdefault("inbound_after_churn_ok", False)
    result.update(failed_steps=failed, seconds=round(time.monotonic() - started, 1),
                  load_avg_1m_end=round(load_avg(), 2),
                  measured_utc=time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()))
    print(table(result))
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
