#!/usr/bin/env python3
"""Cluster benchmark: 5 real node processes on loopback, versus plain py-libp2p GossipSub.

Three measurements:

1. ``raw_gossipsub_rate_per_s``: 5 ``raw_gossip.py --stock`` processes (py-libp2p 0.8.1 as
   shipped, no patch of ours: ``stock_gossip.py``, with the node's router arguments; no SDS, no
   storage, no HTTP) publish messages padded to the size of a node's SDS gossip message.
   ``--raw ours`` runs them on our patched stack (``node.p2p.open_host``) instead; the JSON's
   ``raw_stack`` says which.
2. ``rate_per_s``: 5 ``syncnode run`` processes (default config); this script publishes through
   each node's HTTP API (``POST /v1/channels/general/events``), round-robin over the nodes.
3. ``catchup_events_per_s``: a fresh node bootstraps from a node holding 100,000 events (20,000
   with ``--quick``) and fetches them through Recon. With it: ``catchup_fetched_ratio`` (events
   the fresh node fetched / events it stored; 1.0 when each event is fetched once),
   ``catchup_peak_rss_mib`` (the fresh node's peak resident memory, VmHWM, its ingest worker
   processes' included), the same catch-up
   with PostgreSQL as the fresh node's database (``catchup_events_per_s_pg``; needs ``--pg URL``
   or ``SYNCNODE_TEST_PG``, a database this script may empty) and a 1,000,000-event catch-up
   (``catchup_events_1m_per_s``; not with ``--quick``).

1 and 2 run side by side (both clusters up, idle between their steps) and their steps alternate,
so that both see the same machine load; 3 runs alone afterwards. Rate stepping is the same for
1 and 2: a step publishes at a fixed target rate for a fixed time
on an open-loop schedule (message ``j`` is sent at ``start + j / rate`` whether or not earlier
ones were answered). A step passes when every publish was answered, every message reached every
one of the 5 processes within 10 s of being sent, and the publisher kept up with the schedule
(achieved rate >= 90% of the target). Rates grow by a factor until a step fails, then the gap
between the last pass and the first failure is bisected. The reported rate is the achieved rate
of the best passing step; the latencies are that step's (send -> stored on each node, all
(event, node) pairs; for a node, "stored" is the ``received_at`` the node records at commit).

``published`` counts every node-benchmark publish (warm-up and all steps, failed ones included);
``delivered_fraction`` is the fraction of those on all 5 nodes once the cluster has been given
a settling time at the end (a publish whose POST failed counts as not delivered).

The last line is the JSON result, also written to docs/bench/cluster.json
(docs/bench/cluster_quick.json with ``--quick``).

Development modes (no JSON written): ``--catchup-only`` runs only 3 and prints the CPU time
per event of both processes (with ``--update-json`` it replaces only the catch-up keys of the
JSON, adding ``catchup_load_avg_1m`` and ``catchup_measured_utc``); ``--cpu-at RATE`` runs
both clusters at one rate and prints the CPU time of all processes per published message, with
the node cluster's gossip messages, Recon sessions and store batches per event.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from benchjson import finish, smoke_path  # noqa: E402
from catchup_log import cached_log  # noqa: E402
from raw_gossip import schedule  # noqa: E402

from sync.sds import SdsChannel  # noqa: E402
from tests.harness.cluster import metric  # noqa: E402
from tests.harness.procs import NodeProcess, start_all  # noqa: E402

NODES = 5
WINDOW_S = 10.0
CHANNEL = "general"
CONTENT_SIZE = 64
OUT = ROOT / "docs" / "bench" / "cluster.json"
OUT_QUICK = ROOT / "docs" / "bench" / "cluster_quick.json"
#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("nodes", "published", "delivered_fraction", "rate_per_s", "latency_p50_ms",
             "latency_p99_ms", "raw_gossipsub_rate_per_s", "catchup_events_per_s",
             "catchup_events", "catchup_fetched_ratio", "catchup_peak_rss_mib",
             "catchup_events_per_s_pg", "catchup_events_1m_per_s", "raw_stack", "quick",
             "load_avg_1m", "cpu_us_per_event_per_node", "batch_rate_per_s",
             "own_backlog_peak_rss_mib")
#: Not measured without PostgreSQL, nor by --quick and --smoke runs: present, null.
#: ``own_backlog_peak_rss_mib`` (issue 31's memory) is backlog_rss.run's figure, measured alone
#: after the cluster stops; null at --smoke size (backlog_rss_bench.py's own smoke run covers it).
OPTIONAL_KEYS = ("catchup_events_per_s_pg", "catchup_events_1m_per_s", "own_backlog_peak_rss_mib")
#: The fixed open-loop rate of ``cpu_us_per_event_per_node`` (issue 31).
CPU_RATE = 100.0
#: A batch request every this many seconds per step of ``batch_rate_per_s``.
BATCH_PERIOD_S = 0.2
PY_SPY = ROOT / ".venv" / "bin" / "py-spy"


@dataclass
class Plan:
    duration_s: float
    start_rate: float
    factor: float
    refine: int
    max_steps: int
    settle_s: float
    catchup_events: int
    catchup_timeout_s: float
    catchup_1m_events: int | None = None
    catchup_1m_timeout_s: float = 1800.0
    ramp_budget_s: float = math.inf  # no new step pair starts after this (keeps --quick short)
    # Pause after a failed step: an overloaded cluster keeps working off its backlog (node:
    # resends, Recon; raw: queued RPCs) for a while, and both clusters share the 2 cores, so
    # without it the next step of *either* system starts on a machine still busy with this one.
    cooldown_s: float = 0.0
    # Pause after every step: a step that passed near the limit still leaves work behind
    # (raw: RPCs queued up to the 10-s window; node: acknowledgements, Recon), which would land
    # on the other system's next step.
    settle_between_s: float = 0.0
    # cpu_us_per_event_per_node: one step at CPU_RATE of this many seconds (smoke: slower).
    cpu_duration_s: float = 15.0
    cpu_rate: float = CPU_RATE
    # batch_rate_per_s: the ramp of batched publishes (events/s), steps of batch_duration_s.
    batch_start_rate: float = 500.0
    batch_duration_s: float = 10.0
    batch_max_steps: int = 6
    # Seconds a measurement waits after its last event arrived before it reads its counters
    # (CPU time, fetches), for the work that follows an arrival (acknowledgements, sessions
    # ending).
    tail_s: float = 2.0
    # Processes of each cluster (the smoke: fewer, each a start-up of seconds of imports).
    nodes: int = NODES


# Quick climbs like the full plan, until a step fails (then bisects once), so both clusters
# reach their limits and the quick ratio means something; a plan capped at a few steps has
# both "pass" its top rate and reads 1.0x whatever the code does. ``max_steps`` (20 * 2^9 =
# 10,240/s) and the time budget only bound a run where nothing fails.
QUICK = Plan(duration_s=3, start_rate=20, factor=2.0, refine=1, max_steps=10, settle_s=10,
             catchup_events=20_000, catchup_timeout_s=15, ramp_budget_s=150, cooldown_s=5)
# One slow step pair and a tiny catch-up: only that every part still runs (make test). Steps
# of a second: each still publishes several events (2, 10 and 50 at their rates).
SMOKE = Plan(duration_s=1, start_rate=2, factor=2.0, refine=0, max_steps=1, settle_s=5,
             catchup_events=500, catchup_timeout_s=120, ramp_budget_s=1, cpu_duration_s=1,
             cpu_rate=10, batch_start_rate=50, batch_duration_s=1, batch_max_steps=1,
             tail_s=0.5, nodes=3)
FULL = Plan(duration_s=15, start_rate=10, factor=1.5, refine=2, max_steps=12, settle_s=60,
            catchup_events=100_000, catchup_timeout_s=300, cooldown_s=20,
            settle_between_s=5, catchup_1m_events=1_000_000)


@dataclass
class Step:
    system: str
    target: float
    published: int
    answered: int
    achieved: float
    delivered_pairs: int
    within_window_pairs: int
    latencies: list[float] = field(repr=False)
    load: float
    nodes: int = NODES  # the cluster's processes (each should store every message)

    @property
    def ok(self) -> bool:
        pairs = self.published * self.nodes
        return (self.answered == self.published and self.within_window_pairs == pairs
                and self.achieved >= 0.9 * self.target)

    def pct(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000

    def row(self) -> str:
        pairs = self.published * self.nodes
        lat = (f"{self.pct(50):8.0f} {self.pct(99):8.0f} {max(self.latencies) * 1000:8.0f}"
               if self.latencies else f"{'-':>8} {'-':>8} {'-':>8}")
        return (f"{self.system:5} {self.target:8.1f} {self.achieved:8.1f} {self.published:6d} "
                f"{self.answered:6d} {self.within_window_pairs / pairs:8.4f} "
                f"{self.delivered_pairs / pairs:8.4f} {lat} {self.load:5.2f} "
                f"{'pass' if self.ok else 'FAIL'}")


HEADER = (f"{'sys':5} {'target/s':>8} {'sent/s':>8} {'msgs':>6} {'acked':>6} {'in10s':>8} "
          f"{'seen':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'load':>5} result")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def load_avg() -> float:
    return os.getloadavg()[0]


class Ramp:
    """Rate stepping: up by ``factor`` until a step fails, then bisect between the last pass
    and the first failure ``refine`` times. A first step that fails steps down instead."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.steps: list[Step] = []
        self.best: float | None = None
        self.fail: float | None = None
        self.rate: float | None = plan.start_rate
        self._refines = 0

    def record(self, step: Step) -> None:
        self.steps.append(step)
        if step.ok:
            self.best = step.target if self.best is None else max(self.best, step.target)
        else:
            self.fail = step.target if self.fail is None else min(self.fail, step.target)
        if self.best is not None and self.fail is not None:
            if self._refines >= self.plan.refine or self.fail <= self.best:
                self.rate = None
            else:
                self.rate = math.sqrt(self.best * self.fail)
                self._refines += 1
        elif len(self.steps) >= self.plan.max_steps:
            self.rate = None
        elif step.ok:
            self.rate = step.target * self.plan.factor
        else:
            self.rate = step.target / self.plan.factor
            if self.rate < 1:
                self.rate = None

    @property
    def done(self) -> bool:
        return self.rate is None


def best_step(steps: list[Step]) -> Step | None:
    passed = [s for s in steps if s.ok]
    return max(passed, key=lambda s: s.achieved) if passed else None


def achieved_rate(send_times: list[float], start_at: float, rate: float) -> float:
    """Messages sent per second of schedule actually used: late sends lower it, bursts don't
    raise it (the clock starts at the scheduled start, not at the first send)."""
    if not send_times:
        return 0.0
    return len(send_times) / (max(send_times) - start_at + 1 / rate)


# -- plain GossipSub ------------------------------------------------------------------------


class RawWorker:
    def __init__(self, log_path: Path, stock: bool) -> None:
        log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve().parent / "raw_gossip.py"),
             *(["--stock"] if stock else [])],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        log.close()
        self.addr = ""

    def wait_ready(self) -> None:
        self.addr = str(self.read()["addr"])

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("raw gossip worker exited; see its log")
        return dict(json.loads(line))

    def ask(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.send(cmd)
        return self.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "quit"})
                self.proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class RawCluster:
    def __init__(self, base: Path, payload: int, stock: bool, nodes: int = NODES) -> None:
        self.payload = payload
        self.workers: list[RawWorker] = []
        self.step_no = 0
        # All started at once (imports take seconds each under load), then linked up.
        for i in range(nodes):
            self.workers.append(RawWorker(base / f"raw{i}.log", stock))
        for worker in self.workers:
            worker.wait_ready()
        for i, worker in enumerate(self.workers[1:], start=1):
            worker.ask({"cmd": "connect", "addrs": [w.addr for w in self.workers[:i]]})
        deadline = time.monotonic() + 30
        while True:
            states = [w.ask({"cmd": "peers"}) for w in self.workers]
            if all(s["mesh"] >= nodes - 1 for s in states):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"raw gossip mesh did not form: {states}")
            time.sleep(0.5)

    def measure(self, rate: float, duration: float) -> Step:
        self.step_no += 1
        total = schedule(rate, duration)
        start_at = time.time() + 0.5
        for i, worker in enumerate(self.workers):
            worker.send({"cmd": "step", "step": self.step_no, "rate": rate, "duration": duration,
                         "index": i, "nodes": len(self.workers), "start_at": start_at,
                         "payload": self.payload, "window_s": WINDOW_S})
        answers = [w.read() for w in self.workers]
        load = load_avg()
        sent: dict[int, float] = {}
        for answer in answers:
            sent.update({int(j): float(t) for j, t in answer["sent"].items()})
        latencies: list[float] = []
        delivered = within = 0
        for i, answer in enumerate(answers):
            recv = {int(j): float(t) for j, t in answer["recv"].items()}
            for j, t_sent in sent.items():
                t = t_sent if j % len(self.workers) == i else recv.get(j)
                if t is None:
                    continue
                delivered += 1
                latencies.append(t - t_sent)
                within += t - t_sent <= WINDOW_S
        return Step("raw", rate, total, len(sent),
                    achieved_rate(list(sent.values()), start_at, rate),
                    delivered, within, latencies, load, len(self.workers))

    def stop(self) -> None:
        with ThreadPoolExecutor(max(1, len(self.workers))) as pool:  # each waits for its exit
            list(pool.map(RawWorker.stop, self.workers))


def sds_gossip_size() -> int:
    """Bytes of a node's gossip message for a CONTENT_SIZE event (signed, with bloom filter)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from sync.identity import peer_id_of

    key = Ed25519PrivateKey.from_private_bytes(b"\1" * 32)
    ch = SdsChannel(CHANNEL, peer_id_of(key), key)
    sizes = [len(ch.send(b"x" * CONTENT_SIZE, 1.0 + i)) for i in range(20)]
    return sizes[-1]


# -- syncnode cluster -------------------------------------------------------------------------


class NodeCluster:
    def __init__(self, base: Path, nodes: int = NODES) -> None:
        self.nodes: list[NodeProcess] = []
        self.step_no = 0
        # node index -> message id -> received_at (ms), everything seen so far.
        self.seen: list[dict[str, int]] = []
        self.cursors: list[int] = []
        self.published: dict[str, float] = {}  # message id -> send time
        self.attempts = 0
        # Started in parallel (each takes seconds to import under load), then joined into a
        # full mesh through the API, as `syncnode join` does.
        self.nodes = start_all([NodeProcess(base / f"n{i}") for i in range(nodes)])
        self.seen = [{} for _ in self.nodes]
        self.cursors = [0 for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            for peer in self.nodes[:i]:
                node.post("/v1/peers", {"multiaddr": peer.listen_addrs[0]})
        deadline = time.monotonic() + 60
        while not all(len(n.get("/v1/peers")["connected"]) >= nodes - 1 for n in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("node cluster did not connect")
            time.sleep(0.5)

    def poll(self) -> None:
        """Read what each node stored since the last poll (seq order) with its commit time."""
        for i, node in enumerate(self.nodes):
            while True:
                answer = node.get(f"/v1/channels/{CHANNEL}/events", order="seq",
                                  after=self.cursors[i], limit=10_000)
                for event in answer["events"]:
                    self.seen[i][event["message_id"]] = int(event["received_at"])
                    self.cursors[i] = max(self.cursors[i], int(event["seq"]))
                if not answer["more"]:
                    break

    def wait_everywhere(self, ids: list[str], deadline: float) -> None:
        while True:
            self.poll()
            if all(m in seen for seen in self.seen for m in ids) or time.time() > deadline:
                return
            time.sleep(0.5)

    def measure(self, rate: float, duration: float, profile: Path | None = None,
                batch: int = 1) -> Step:
        """One open-loop step; ``batch`` > 1: events go in batch bodies of that many, one
        request every ``batch / rate`` s (each event's send time is its request's)."""
        self.step_no += 1
        total = schedule(rate, duration)
        urls = [(n.api_url, n.token) for n in self.nodes]
        spy = None
        if profile is not None:
            spy = start_profile(self.nodes[1], profile / f"node-step{self.step_no}-"
                                f"{rate:.0f}per_s.txt", duration)
        start_at, results = trio.run(_publish_all, urls, self.step_no, rate, total, batch)
        load = load_avg()
        self.attempts += total
        sends = {mid: t for (t, _, mid) in results if mid is not None}
        self.published.update(sends)
        self.wait_everywhere(list(sends), start_at + (total - 1) / rate + WINDOW_S + 1)
        if spy is not None:
            spy.wait()
        latencies: list[float] = []
        delivered = within = 0
        for seen in self.seen:
            for mid, t_sent in sends.items():
                received_at = seen.get(mid)
                if received_at is None:
                    continue
                delivered += 1
                latency = max(0.0, received_at / 1000 - t_sent)
                latencies.append(latency)
                within += latency <= WINDOW_S
        return Step("node" if batch == 1 else "batch", rate, total, len(sends),
                    achieved_rate([r[0] for r in results], start_at, rate / batch),
                    delivered, within, latencies, load, len(self.nodes))

    def delivered_fraction(self, settle_s: float) -> float:
        ids = list(self.published)
        self.wait_everywhere(ids, time.time() + settle_s)
        everywhere = sum(1 for m in ids if all(m in seen for seen in self.seen))
        return everywhere / max(self.attempts, 1)

    def post_mortem(self) -> str:
        """Each node's state after a failed step: running, or its exit code and log tail."""
        lines = []
        for i, node in enumerate(self.nodes):
            code = node.proc.poll() if node.proc is not None else None
            lines.append(f"node {i}: " + ("running" if code is None else
                                          f"exited {code}; log tail:\n{node.log_tail(30)}"))
        return "\n".join(lines)

    def stop(self) -> list[int | None]:
        """SIGTERM to every node at once; their exit codes (None: killed after 30 s)."""
        def stop_one(node: NodeProcess) -> int | None:
            try:
                return node.terminate(timeout=30)
            except subprocess.TimeoutExpired:
                node.kill()
                return None

        with ThreadPoolExecutor(max(1, len(self.nodes))) as pool:
            return list(pool.map(stop_one, self.nodes))


async def _publish_all(
    urls: list[tuple[str, str]], step: int, rate: float, total: int, batch: int = 1
) -> tuple[float, list[tuple[float, float | None, str | None]]]:
    """Publish ``total`` events round-robin over the nodes, open loop at ``rate``, in
    requests of ``batch`` events (a batch body when > 1).

    Returns the scheduled start and (send time, answer time, message id) per event.
    """
    results: list[tuple[float, float | None, str | None]] = []
    errors: Counter[str] = Counter()
    # Idle connections are dropped before the node's api.idle_timeout_s (5 s) would close
    # them: a request on a connection the server is closing fails (h11 RemoteProtocolError).
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100,
                          keepalive_expiry=2.0)
    # Clients first (each builds an SSL context: slow under load), then the clock starts.
    clients = [httpx.AsyncClient(base_url=u, timeout=60, limits=limits,
                                 headers={"Authorization": f"Bearer {token}"})
               for u, token in urls]
    start_at = time.time() + 0.2

    def content(j: int) -> str:
        text = f"bench s{step} j{j} "
        return text + "." * max(0, CONTENT_SIZE - len(text))

    async def one(r: int) -> None:
        first, last = r * batch, min(total, (r + 1) * batch)
        body: dict[str, Any] = (
            {"content": content(first)} if batch == 1 else
            {"events": [{"content": content(j)} for j in range(first, last)]})
        t_sent = time.time()
        try:
            answer = await clients[r % len(clients)].post(f"/v1/channels/{CHANNEL}/events",
                                                          json=body)
            answer.raise_for_status()
            t_answer = time.time()
            data = answer.json()
            for event in data["events"] if batch > 1 else [data]:
                results.append((t_sent, t_answer, str(event["message_id"])))
        except httpx.HTTPError as exc:
            results.extend((t_sent, None, None) for _ in range(first, last))
            errors[type(exc).__name__] += 1

    try:
        async with trio.open_nursery() as nursery:
            for r in range(math.ceil(total / batch)):
                delay = start_at + r * batch / rate - time.time()
                if delay > 0:
                    await trio.sleep(delay)
                nursery.start_soon(one, r)
    finally:
        for client in clients:
            await client.aclose()
    if errors:
        print(f"      publish errors: {dict(errors)}", flush=True)
    return start_at, results


def start_profile(node: NodeProcess, out: Path, duration: float) -> subprocess.Popen[bytes] | None:
    if not PY_SPY.exists() or node.proc is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(PY_SPY), "record", "-p", str(node.proc.pid), "-f", "raw", "-o", str(out),
         "-d", str(max(1, int(duration))), "--nonblocking",
         *(["--gil"] if os.environ.get("SYNCNODE_SPY_GIL") else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def start_clusters(base: Path, payload: int, stock: bool,
                   nodes: int = NODES) -> tuple[RawCluster, NodeCluster]:
    """Both clusters of ``nodes`` processes, started side by side (ten processes importing for
    seconds each, before any step); if one fails to start, the other is stopped."""
    with ThreadPoolExecutor(2) as pool:
        raw = pool.submit(RawCluster, base, payload, stock, nodes)
        node = pool.submit(NodeCluster, base, nodes)
    if raw.exception() is None and node.exception() is None:
        return raw.result(), node.result()
    if raw.exception() is None:
        raw.result().stop()
    if node.exception() is None:
        node.result().stop()
    raise (raw.exception() or node.exception())  # type: ignore[misc]


def cpu_per_event_per_node(cluster: NodeCluster, plan: Plan) -> tuple[float, Step]:
    """``cpu_us_per_event_per_node``: CPU time (user + system, ingest workers included) of the
    5 node processes over one open-loop step at ``plan.cpu_rate`` (100/s), its delivery
    everywhere and 2 s more, per published event and per node. Unlike a rate, it hardly
    depends on what else the machine runs."""
    before = sum(map(cpu_seconds, cluster.nodes))
    step = cluster.measure(plan.cpu_rate, plan.cpu_duration_s)
    time.sleep(plan.tail_s)
    spent = sum(map(cpu_seconds, cluster.nodes)) - before
    return spent / max(step.published, 1) / len(cluster.nodes) * 1e6, step


def batch_ramp(cluster: NodeCluster, plan: Plan) -> list[Step]:
    """``batch_rate_per_s``: the same stepping as the single publishes, in batch bodies of
    ``rate x BATCH_PERIOD_S`` events (one request per node every second at most)."""
    ramp = Ramp(replace(plan, start_rate=plan.batch_start_rate, factor=1.5,
                        max_steps=plan.batch_max_steps, refine=min(plan.refine, 1)))
    while not ramp.done:
        assert ramp.rate is not None
        batch = max(1, round(ramp.rate * BATCH_PERIOD_S))
        ramp.record(cluster.measure(ramp.rate, plan.batch_duration_s, batch=batch))
        print(ramp.steps[-1].row() + f" (batches of {batch})", flush=True)
        if not ramp.steps[-1].ok:
            cluster.wait_everywhere(list(cluster.published), time.time() + 60)
            time.sleep(plan.cooldown_s)
        time.sleep(plan.settle_between_s)
    return ramp.steps


def own_backlog_peak(smoke: bool) -> float | None:
    """``own_backlog_peak_rss_mib``: a node holding 200 unacknowledged 500 KB events of its own
    (scripts/bench/backlog_rss.py); None at smoke size."""
    if smoke:
        return None
    from backlog_rss import run as backlog_run
    print("\nown backlog: one node holds 200 unacknowledged 500 KB events of its own")
    figure = backlog_run()["own_backlog_peak_rss_mib"]
    print(f"  own_backlog_peak_rss_mib {figure} (target <= 512)")
    return float(figure)


def live_keys(node_steps: list[Step], raw_steps: list[Step], cpu_us: float | None,
              batch_steps: list[Step], backlog_mib: float | None) -> dict[str, Any]:
    best_node, best_raw = best_step(node_steps), best_step(raw_steps)
    best_batch = best_step(batch_steps)
    return {
        "rate_per_s": round(best_node.achieved, 1) if best_node else 0.0,
        "latency_p50_ms": round(best_node.pct(50), 1) if best_node else None,
        "latency_p99_ms": round(best_node.pct(99), 1) if best_node else None,
        "raw_gossipsub_rate_per_s": round(best_raw.achieved, 1) if best_raw else 0.0,
        "cpu_us_per_event_per_node": round(cpu_us) if cpu_us is not None else None,
        "batch_rate_per_s": round(best_batch.achieved, 1) if best_batch else 0.0,
        "batch_latency_p99_ms": round(best_batch.pct(99), 1) if best_batch else None,
        "own_backlog_peak_rss_mib": backlog_mib,
    }


# -- catch-up ----------------------------------------------------------------------------------


@dataclass
class Catchup:
    events: int
    fetched: int
    seconds: float
    from_cache: bool
    recon_fetched: float
    recon_errors: float
    load: float
    # CPU time (user + system) per stored event, of the fresh node and of the source: unlike
    # the rate, nearly independent of what else the 2 cores are running.
    # The fresh node's figures include its ingest worker processes; their share apart.
    cpu_us_fresh: float = 0.0
    cpu_us_source: float = 0.0
    cpu_us_workers: float = 0.0
    peak_rss_mib: float = 0.0
    peak_rss_workers_mib: float = 0.0

    @property
    def rate(self) -> float:
        return self.fetched / self.seconds if self.seconds > 0 else 0.0

    @property
    def fetched_ratio(self) -> float:
        return self.recon_fetched / self.fetched if self.fetched else 0.0

    def summary(self) -> str:
        return (f"{self.fetched}/{self.events} events stored in {self.seconds:.1f} s "
                f"(recon fetched {self.recon_fetched:.0f}, ratio {self.fetched_ratio:.3f}; "
                f"failed sessions {self.recon_errors:.0f}; source log "
                f"{'from cache' if self.from_cache else 'built now'}; load {self.load:.2f})"
                f" -> {self.rate:.0f} events/s; CPU per event: fresh "
                f"{self.cpu_us_fresh:.0f} us (of which ingest workers "
                f"{self.cpu_us_workers:.0f} us), source {self.cpu_us_source:.0f} us; fresh node "
                f"peak RSS {self.peak_rss_mib:.0f} MiB (of which ingest workers "
                f"{self.peak_rss_workers_mib:.0f} MiB)")


def _hwm_mib(pid: int) -> float:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # exited meanwhile
        return 0.0
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (a node's ingest workers), from Linux /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def peak_rss_mib(node: NodeProcess) -> tuple[float, float]:
    """Peak resident set (VmHWM, Linux /proc) of the node process and the sum over its worker
    processes (each worker's own peak: together an upper bound of their simultaneous peak)."""
    assert node.proc is not None
    return _hwm_mib(node.proc.pid), sum(map(_hwm_mib, children(node.proc.pid)))


def empty_database(url: str) -> None:
    """Drop every table of ``url`` (the fresh node's PostgreSQL database starts empty)."""
    from sqlalchemy import MetaData, create_engine

    engine = create_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        meta.drop_all(engine)
    finally:
        engine.dispose()


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(node: NodeProcess | RawWorker) -> float:
    """utime + stime of a node (or raw worker) process so far (Linux /proc), its live child
    processes (a node's ingest workers) included."""
    assert node.proc is not None
    return _cpu_of(node.proc.pid) + sum(map(_cpu_of, children(node.proc.pid)))


def worker_cpu_seconds(node: NodeProcess) -> float:
    """The part of ``cpu_seconds`` spent in the node's worker processes."""
    assert node.proc is not None
    return sum(map(_cpu_of, children(node.proc.pid)))


def measure_cpu(rate: float, duration: float, base: Path, rounds: int, stock: bool,
                profile: Path | None = None) -> None:
    """CPU time per published message of both clusters at one fixed rate (both pass it), all
    processes included (for the node cluster, this process's HTTP client too): unlike the
    highest passing rate, nearly independent of what else the machine runs."""
    raw, cluster = start_clusters(base, sds_gossip_size(), stock)
    try:
        raw.measure(5, 1)
        cluster.measure(5, 1)
        print(f"CPU per published message at {rate:g}/s, {duration:g}-s steps "
              "(5 processes, through delivery everywhere + 2 s):")
        counters = ("p2p_gossip_published_total", "p2p_gossip_copies_received_total",
                    "p2p_gossip_duplicates_received_total", "p2p_streams_opened_total",
                    "recon_sessions_total", "sds_resends_total", "store_batches_total")

        def totals() -> list[float]:
            return [sum(metric(n, c) for n in cluster.nodes) for c in counters]

        for _ in range(rounds):
            for name, procs in (("raw", raw.workers), ("node", cluster.nodes)):
                counted = totals()
                procs_before, own_before = sum(map(cpu_seconds, procs)), time.process_time()
                if name == "raw":
                    step = raw.measure(rate, duration)
                else:
                    step = cluster.measure(rate, duration, profile)
                time.sleep(2)
                own = time.process_time() - own_before
                spent = sum(map(cpu_seconds, procs)) - procs_before + own
                print(f"  {name:5} {spent / step.published * 1000:7.1f} ms/message "
                      f"({own / step.published * 1000:4.1f} of them in this process) "
                      f"(p50 {step.pct(50):6.0f} ms, {'pass' if step.ok else 'FAIL'}, "
                      f"load {step.load:.2f})", flush=True)
                if name == "node":
                    per = [(b - a) / step.published for a, b in zip(counted, totals(),
                                                                    strict=True)]
                    print("        per message: " + ", ".join(
                        f"{c} {v:.2f}" for c, v in zip(counters, per, strict=True)))
    finally:
        raw.stop()
        cluster.stop()


def measure_catchup(base: Path, plan: Plan, profile: Path | None,
                    fresh_env: dict[str, str] | None = None, *, events: int | None = None,
                    timeout_s: float | None = None, tag: str = "",
                    profile_at: Sequence[int] = ()) -> Catchup:
    """One catch-up. ``profile``: py-spy profiles of both nodes, the first 20 s, and 15 s from
    each count of stored events in ``profile_at`` (``catchup-{fresh,source}-N.txt``); the
    rate per tenth of the log is printed as it goes (is it flat with size?)."""
    count, from_cache = cached_log(base / f"src{tag}", events or plan.catchup_events)
    source = NodeProcess(base / f"src{tag}").start(timeout=600)
    fresh = None
    try:
        fresh = NodeProcess(base / f"fresh{tag}", "--bootstrap", source.listen_addrs[0],
                            env=fresh_env).start()
        t0 = time.time()
        cpu0 = cpu_seconds(fresh), cpu_seconds(source), worker_cpu_seconds(fresh)
        spy = start_profile(fresh, profile / "catchup-fresh.txt", 20) if profile else None
        spy_src = start_profile(source, profile / "catchup-source.txt", 20) if profile else None
        deadline = t0 + (timeout_s or plan.catchup_timeout_s)
        stored = 0.0
        todo = sorted(profile_at) if profile else []
        spies: list[subprocess.Popen[bytes] | None] = [spy, spy_src]
        step = max(count // 10, 1)
        mark, mark_t = 0.0, t0
        while time.time() < deadline:
            stored = metric(fresh, "events_stored_total")
            if stored >= count:
                break
            if todo and stored >= todo[0] and profile is not None:
                at = todo.pop(0)
                spies += [start_profile(fresh, profile / f"catchup-fresh-{at}.txt", 15),
                          start_profile(source, profile / f"catchup-source-{at}.txt", 15)]
            if stored >= mark + step:
                now = time.time()
                print(f"    {stored:9.0f} stored at {now - t0:6.1f} s: "
                      f"{(stored - mark) / (now - mark_t):7.0f} events/s since {mark:.0f} "
                      f"(load {load_avg():.2f})", flush=True)
                mark, mark_t = stored, now
            time.sleep(0.2)
        seconds = time.time() - t0
        cpu = (cpu_seconds(fresh) - cpu0[0], cpu_seconds(source) - cpu0[1],
               worker_cpu_seconds(fresh) - cpu0[2])
        load = load_avg()
        rss, rss_workers = peak_rss_mib(fresh)
        # Sessions still running may fetch a little more after the last event is stored:
        # that counts against the ratio too.
        time.sleep(plan.tail_s)
        fetched = metric(fresh, "recon_events_fetched_total")
        errors = metric(fresh, "recon_errors_total")
        for proc in spies:
            if proc is not None:
                proc.wait()
        per = 1e6 / max(stored, 1)
        return Catchup(count, int(stored), seconds, from_cache, fetched, errors, load,
                       cpu[0] * per, cpu[1] * per, cpu[2] * per, rss + rss_workers, rss_workers)
    finally:
        for node in (fresh, source):
            if node is not None:
                try:
                    node.terminate()
                except subprocess.TimeoutExpired:
                    node.kill()


def extra_catchups(base: Path, plan: Plan, pg_url: str | None
                   ) -> tuple[Catchup | None, Catchup | None]:
    """The catch-up with PostgreSQL as the fresh node's database, and the 1M-event one."""
    catchup_pg = catchup_1m = None
    if pg_url:
        empty_database(pg_url)
        print(f"\ncatch-up, fresh node on PostgreSQL: {plan.catchup_events} events")
        catchup_pg = measure_catchup(base, plan, None, {"SYNCNODE_STORAGE_URL": pg_url},
                                     tag="-pg")
        print(f"  {catchup_pg.summary()}")
    else:
        print("\ncatch-up on PostgreSQL skipped: no --pg URL (nor SYNCNODE_TEST_PG)")
    if plan.catchup_1m_events:
        print(f"\ncatch-up: {plan.catchup_1m_events} events")
        catchup_1m = measure_catchup(base, plan, None, events=plan.catchup_1m_events,
                                     timeout_s=plan.catchup_1m_timeout_s, tag="-1m")
        print(f"  {catchup_1m.summary()}")
    return catchup_pg, catchup_1m


def catchup_keys(catchup: Catchup | None, catchup_pg: Catchup | None,
                 catchup_1m: Catchup | None) -> dict[str, Any]:
    main: dict[str, Any] = {}
    if catchup is not None:
        main = {
            "catchup_events_per_s": round(catchup.rate, 1),
            "catchup_events": catchup.events,
            "catchup_cpu_us_per_event": {"fresh": round(catchup.cpu_us_fresh),
                                         "fresh_ingest_workers": round(catchup.cpu_us_workers),
                                         "source": round(catchup.cpu_us_source)},
            "catchup_fetched_ratio": round(catchup.fetched_ratio, 4),
            "catchup_peak_rss_mib": round(catchup.peak_rss_mib, 1),
        }
    return {
        **main,
        "catchup_events_per_s_pg": round(catchup_pg.rate, 1) if catchup_pg else None,
        "catchup_events_1m_per_s": round(catchup_1m.rate, 1) if catchup_1m else None,
        "catchup_1m_fetched_ratio": round(catchup_1m.fetched_ratio, 4) if catchup_1m else None,
        "catchup_1m_peak_rss_mib": round(catchup_1m.peak_rss_mib, 1) if catchup_1m else None,
        "catchup_1m_cpu_us_per_event": ({"fresh": round(catchup_1m.cpu_us_fresh),
                                         "fresh_ingest_workers": round(catchup_1m.cpu_us_workers),
                                         "source": round(catchup_1m.cpu_us_source)}
                                        if catchup_1m else None),
    }


# -- main --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short steps, 20,000-event catch-up")
    parser.add_argument("--profile", metavar="DIR", type=Path,
                        help="record py-spy profiles (raw format) of node 1 and the fresh node")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (node logs)")
    parser.add_argument("--pg", metavar="URL", default=os.environ.get("SYNCNODE_TEST_PG"),
                        help="PostgreSQL database for the fresh node of catchup_events_per_s_pg "
                             "(emptied first; default $SYNCNODE_TEST_PG; without it the key is "
                             "null)")
    parser.add_argument("--catchup-only", action="store_true",
                        help="only the catch-up measurements (writes no JSON unless "
                             "--update-json)")
    parser.add_argument("--cpu-at", type=float, metavar="RATE",
                        help="only compare CPU per message of both clusters at RATE/s "
                             "(for development; writes no JSON)")
    parser.add_argument("--update-json", action="store_true",
                        help="with --catchup-only: replace the catch-up keys of "
                             "docs/bench/cluster.json (the others stay from the last full run)")
    parser.add_argument("--only-1m", action="store_true",
                        help="only the 1,000,000-event catch-up (writes no JSON unless "
                             "--update-json)")
    parser.add_argument("--profile-at", metavar="N,N", default="",
                        help="with --profile: also 15-s profiles of both nodes of the catch-up "
                             "when the fresh node has stored N events")
    parser.add_argument("--catchup-timeout", type=float, metavar="S",
                        help="give the catch-up (the 1M one with --only-1m) at most S seconds")
    parser.add_argument("--catchup-events", type=int, metavar="N",
                        help="with --catchup-only: N events, and no 1M-event run")
    parser.add_argument("--start-rate", type=float, metavar="R",
                        help="first step of the single-publish ramps at R/s (default 10)")
    parser.add_argument("--live-only", action="store_true",
                        help="only the live measurements (rates, CPU per event, batches), no "
                             "catch-up; writes no JSON unless --update-json (then replaces the "
                             "live keys of docs/bench/cluster.json)")
    parser.add_argument("--smoke", action="store_true",
                        help="one 2-msg/s step, a 500-event catch-up, JSON to a temp file")
    parser.add_argument("--raw", choices=("stock", "ours"), default="stock",
                        help="the raw GossipSub cluster: py-libp2p 0.8.1 as shipped (default; "
                             "what the rate target compares against) or on our patched stack")
    args = parser.parse_args()
    plan = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.catchup_events:
        plan = replace(plan, catchup_events=args.catchup_events, catchup_1m_events=None)
    if args.catchup_timeout:
        plan = replace(plan, catchup_timeout_s=args.catchup_timeout,
                       catchup_1m_timeout_s=args.catchup_timeout)
    if args.start_rate:
        plan = replace(plan, start_rate=args.start_rate)
    profile_at = [int(n) for n in args.profile_at.split(",") if n]
    base = Path(tempfile.mkdtemp(prefix="syncnode-cluster-bench-"))
    if args.cpu_at:
        try:
            measure_cpu(args.cpu_at, plan.duration_s, base, rounds=2, stock=args.raw == "stock",
                        profile=args.profile)
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
        return 0
    if args.catchup_only or args.only_1m:
        first: Catchup | None = None
        catchup_pg_only: Catchup | None = None
        catchup_1m_only: Catchup | None = None
        try:
            load_start = load_avg()
            if args.only_1m:
                plan = replace(plan, catchup_events=plan.catchup_1m_events or 1_000_000)
                catchup_1m_only = measure_catchup(base, plan, args.profile, tag="-1m",
                                                  profile_at=profile_at,
                                                  timeout_s=plan.catchup_1m_timeout_s)
                print(catchup_1m_only.summary())
            else:
                first = measure_catchup(base, plan, args.profile, profile_at=profile_at)
                print(first.summary())
                catchup_pg_only, catchup_1m_only = extra_catchups(base, plan, args.pg)
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
        if args.update_json:
            # Only the catch-up keys measured now are replaced; the rest stays as it was.
            result = json.loads(OUT.read_text()) if OUT.exists() else {}
            measured = catchup_keys(first, catchup_pg_only, catchup_1m_only)
            result.update({k: v for k, v in measured.items() if v is not None})
            # Stamp each catch-up measured now (the 1M one too when it ran after the first).
            tags = ["catchup_1m"] if args.only_1m else \
                ["catchup", *(["catchup_1m"] if catchup_1m_only is not None else [])]
            for tag in tags:
                result[f"{tag}_load_avg_1m"] = [round(load_start, 2), round(load_avg(), 2)]
                result[f"{tag}_measured_utc"] = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
            OUT.write_text(json.dumps(result, indent=2) + "\n")
            print(json.dumps(result))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_start = load_avg()
    started = time.monotonic()
    print(f"cluster benchmark: {plan.nodes} processes on 127.0.0.1, "
          f"{'quick' if args.quick else 'full'}, steps of {plan.duration_s:g} s, "
          f"window {WINDOW_S:g} s, work dir {base}")
    print(f"machine: {os.cpu_count()} cores, load average at start {load_start:.2f}")
    raw: RawCluster | None = None
    cluster: NodeCluster | None = None
    beside: ThreadPoolExecutor | None = None
    later: tuple[Future[Catchup], Future[tuple[Catchup | None, Catchup | None]]] | None = None
    try:
        payload = sds_gossip_size()
        print(f"raw: plain GossipSub, {payload}-byte messages (a node's SDS message size); "
              f"node: syncnode, {CONTENT_SIZE}-byte contents via POST /v1/channels/{CHANNEL}"
              "/events; the two clusters run side by side and their steps alternate, so that "
              "both see the same machine load")
        if args.smoke and not args.live_only:
            # The smoke's catch-ups start with the clusters (their nodes' start-up is CPU
            # time either way) and are over about when the warm-up steps are: its figures are
            # not judged. Measured ones run after the live steps, alone.
            beside = ThreadPoolExecutor(2)
            later = (beside.submit(measure_catchup, base, plan, args.profile),
                     beside.submit(extra_catchups, base, plan, args.pg))
        raw, cluster = start_clusters(base, payload, args.raw == "stock", plan.nodes)
        raw.measure(5, 1)  # warm-up: first messages on fresh connections and meshes
        cluster.measure(5, 1)
        print(HEADER)
        raw_ramp, node_ramp = Ramp(plan), Ramp(plan)
        stop_at = time.monotonic() + plan.ramp_budget_s
        while not (raw_ramp.done and node_ramp.done) and time.monotonic() < stop_at:
            if raw_ramp.rate is not None:
                raw_ramp.record(raw.measure(raw_ramp.rate, plan.duration_s))
                print(raw_ramp.steps[-1].row(), flush=True)
                time.sleep(plan.settle_between_s
                           + (0 if raw_ramp.steps[-1].ok else plan.cooldown_s))
            if node_ramp.rate is not None:
                node_ramp.record(cluster.measure(node_ramp.rate, plan.duration_s, args.profile))
                print(node_ramp.steps[-1].row(), flush=True)
                if not node_ramp.steps[-1].ok:
                    # The node cluster also gets to finish delivering the failed step.
                    cluster.wait_everywhere(list(cluster.published), time.time() + 60)
                    time.sleep(plan.cooldown_s)
                time.sleep(plan.settle_between_s)
        for ramp in (raw_ramp, node_ramp):
            if ramp.fail is None and ramp.steps:
                print(f"{ramp.steps[-1].system}: no step failed within the plan, its rate is "
                      "a lower bound", flush=True)
        raw_steps, node_steps = raw_ramp.steps, node_ramp.steps
        raw.stop()
        raw = None
        cpu_us, cpu_step = cpu_per_event_per_node(cluster, plan)
        print(f"{cpu_step.row()}  -> CPU {cpu_us:.0f} us per event per node at "
              f"{plan.cpu_rate:g}/s (target <= 500)", flush=True)
        batch_steps = batch_ramp(cluster, plan)
        fraction = cluster.delivered_fraction(plan.settle_s)
        published = cluster.attempts
        exit_codes = cluster.stop()
        cluster = None

        catchup = catchup_pg = catchup_1m = None
        if not args.live_only:
            print(f"\ncatch-up: a fresh node fetches {plan.catchup_events} events through Recon")
            if later:
                catchup, (catchup_pg, catchup_1m) = later[0].result(), later[1].result()
                print(f"  {catchup.summary()}")
            else:  # one after the other, each alone on the machine
                catchup = measure_catchup(base, plan, args.profile)
                print(f"  {catchup.summary()}")
                catchup_pg, catchup_1m = extra_catchups(base, plan, args.pg)
    except BaseException:
        # A step that failed with an error (a node's API refusing connections: issue 31) keeps
        # the work dir and says which node stopped and why, instead of losing its log.
        if cluster is not None:
            print(cluster.post_mortem(), file=sys.stderr)
        print(f"work dir kept: {base}", file=sys.stderr)
        args.keep = True
        raise
    finally:
        if raw is not None:
            raw.stop()
        if cluster is not None:
            cluster.stop()
        if beside is not None:
            beside.shutdown(wait=True)
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    live = live_keys(node_steps, raw_steps, cpu_us, batch_steps, own_backlog_peak(args.smoke))
    rate, raw_rate = live["rate_per_s"], live["raw_gossipsub_rate_per_s"]
    load_end = load_avg()
    print(f"\nnode exit codes after SIGTERM: {exit_codes}")
    print(f"rate_per_s {rate:.1f} vs raw GossipSub {raw_rate:.1f} "
          f"({rate / raw_rate if raw_rate else 0:.2f}x; target >= 3x, p99 <= 1000 ms: "
          f"{live['latency_p99_ms']}); delivered_fraction {fraction:.4f}; "
          f"cpu_us_per_event_per_node {live['cpu_us_per_event_per_node']} (target <= 500); "
          f"batch_rate_per_s {live['batch_rate_per_s']} (target >= 2000); "
          + (f"catch-up {catchup.rate:.0f} events/s (target >= 10000); " if catchup else "")
          + f"load average {load_start:.2f} -> {load_end:.2f}; "
          f"{time.monotonic() - started:.0f} s")
    result = {
        "nodes": plan.nodes,
        "published": published,
        "delivered_fraction": round(fraction, 6),
        **live,
        **catchup_keys(catchup, catchup_pg, catchup_1m),
        "raw_stack": args.raw,
        "quick": args.quick or args.smoke,
        "load_avg_1m": [round(load_start, 2), round(load_end, 2)],
    }
    if args.live_only:
        # Only the live keys measured now; the catch-up keys stay from the last run.
        keep = json.loads(OUT.read_text()) if OUT.exists() else {}
        result = {**keep, **{k: v for k, v in result.items() if not k.startswith("catchup")},
                  "live_measured_utc": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())}
        if args.update_json and not args.smoke:
            OUT.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result))
        return 0
    out = smoke_path("cluster") if args.smoke else OUT_QUICK if args.quick else OUT
    return finish(result, JSON_KEYS, out, optional=OPTIONAL_KEYS)


if __name__ == "__main__":
    sys.exit(main())
