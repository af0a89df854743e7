"""The three attacks of issue 28 for ``attack_bench.py`` (a helper module, not a benchmark).

* :func:`table_takeover`: a member's backdated declaration of the seeded table naming itself
  its only writer (and a second one as a plain early event), gossiped to the victim; returns
  whether any honest node then has another owner or lost rows (``table_takeover_ok``);
* :func:`poisoned_snapshot`: ``syncnode bootstrap`` of a fresh data dir from a snapshot signed
  by a key nobody trusts, and from one by a trusted key holding events a year ahead; returns
  whether either was loaded (``poisoned_snapshot_loaded``);
* :func:`recon_flood_p99_ms`: honest publish latency p99 on the victim while ``identities``
  fresh hostile identities push Recon messages at it (``recon_flood_publish_p99_ms``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.crdt import SchemaDeclaration
from sync.identity import peer_id_of
from sync.sds import encode_event
from tests.harness.cluster import metric, wait_for
from tests.harness.procs import NodeProcess
from tests.harness.recon_flood import Flood, percentile_ms, publish_latencies, wait_flood_started

# The hostile snapshot test's builder: a snapshot by a given signer of one member's events.
from tests.harness.snapshots import signed_snapshot

__all__ = ["DB_TABLE", "poisoned_snapshot", "recon_flood_p99_ms", "table_takeover"]

ROOT = Path(__file__).resolve().parents[2]
#: The seeded table every bench node declares at start (``db.tables``), with its settle time.
DB_TABLE = '{"users": {"columns": {"name": "text", "n": "integer"}}}'
YEAR_MS = 365 * 86_400_000

Gossip = Callable[[str, list[bytes], str], None]


def _owner(node: NodeProcess) -> str | None:
    tables = node.get("/v1/db")["tables"]
    return tables["users"].get("owner") if "users" in tables else None


def _rows(node: NodeProcess) -> int:
    return len(node.get("/v1/db/users", limit=1000)["rows"])


def table_takeover(honest: Sequence[NodeProcess], rows: int, settle_s: float,
                   gossip: Gossip) -> tuple[bool, str]:
    """(taken over?, what was seen). The ``honest`` nodes, connected from their start, share
    the seeded table; ``gossip(target, wires, channel)`` sends as a fresh hostile host to the
    first of them."""
    nodes = list(honest)
    wait_for(lambda: _owner(nodes[0]) is not None
             and all(_owner(n) == _owner(nodes[0]) for n in nodes), 90,
             "the seeded table has no common owner")
    owner = _owner(nodes[0])
    writer = next(n for n in nodes if n.peer_id == owner)
    for k in range(rows):
        writer.post("/v1/db/users", {"op": "upsert", "id": f"e{k}",
                                     "values": {"name": f"v{k}", "n": k}})
    wait_for(lambda: all(_rows(n) == rows for n in nodes), 90, "rows did not replicate")
    time.sleep(settle_s)  # past db.settle_ms since every node first saw the table
    key = Ed25519PrivateKey.generate()
    attacker = peer_id_of(key)
    now_ms = int(time.time() * 1000)
    backdated = SchemaDeclaration("users", {"name": "text"}, frozenset({attacker}), 0,
                                  attacker, backdated=True)
    early = SchemaDeclaration("users", {"name": "text"}, frozenset({attacker}), 5, attacker)
    wires = [encode_event("db", attacker, now_ms + i, (), d.encoded, key).wire
             for i, d in enumerate((backdated, early))]
    gossip(nodes[0].listen_addrs[0], wires, "db")
    taken = False

    def judged() -> bool:
        nonlocal taken
        taken = any(_owner(n) != owner or _rows(n) != rows for n in honest)
        refused = all('outcome="takeover"' in n.get("/metrics") for n in honest)
        return taken or refused
    try:
        wait_for(judged, 60, "the declarations were neither applied nor refused")
    except AssertionError:
        taken = any(_owner(n) != owner or _rows(n) != rows for n in honest)
    owners = {n.peer_id[-6:]: (_owner(n) or "-")[-6:] for n in honest}
    return taken, f"owner {owner[-6:] if owner else '-'}; now {owners}"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "node.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def poisoned_snapshot(work: Path, events: int = 30) -> tuple[bool, str]:
    """(was either poisoned snapshot loaded?, the exit codes)."""
    work.mkdir(parents=True, exist_ok=True)
    stranger, trusted = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    now_ms = int(time.time() * 1000)
    untrusted = signed_snapshot(work, "untrusted", stranger, [now_ms - 60_000 + i
                                                         for i in range(events)])
    future = signed_snapshot(work, "future", trusted, [now_ms + YEAR_MS + i for i in range(events)])
    runs = [("bootstrap", "--from-snapshot", str(untrusted), "--data-dir",
             str(work / "victim-untrusted")),
            ("bootstrap", "--from-snapshot", str(future), "--data-dir",
             str(work / "victim-future"), "--signer", peer_id_of(trusted))]
    with ThreadPoolExecutor(len(runs)) as pool:  # two fresh data dirs: independent
        codes = [done.returncode for done in pool.map(lambda args: _cli(*args), runs)]
    return any(code == 0 for code in codes), f"bootstrap exit codes {codes}"


def recon_flood_p99_ms(victim: NodeProcess, identities: int, publishes: int) -> tuple[float,
                                                                                       str]:
    """(publish p99 ms on ``victim`` during the flood, a summary line)."""
    base = publish_latencies(victim, max(publishes // 2, 10), prefix="flood-base")
    counters = ("work_units_total", "work_deferred_total", "work_refused_total")
    before = [metric(victim, name) for name in counters]
    flood = Flood(victim.listen_addrs[0], identities=identities).start()
    try:
        wait_flood_started(victim, flood, identities)
        during = publish_latencies(victim, publishes, prefix="flood")
    finally:
        flood.stop()
    units, deferred, refused = (metric(victim, n) - b for n, b in zip(counters, before,
                                                                       strict=True))
    p99 = percentile_ms(during, 0.99)
    # Whether the flood asked for more than the budget: messages sent vs answered, and what
    # the victim's work gate did meanwhile (granted units, requests slowed and refused).
    return p99, (f"p50/p99 {percentile_ms(base, 0.5)}/{percentile_ms(base, 0.99)} ms before, "
                 f"{percentile_ms(during, 0.5)}/{p99} ms during; {flood.sent} messages sent, "
                 f"{flood.answered} answered; work units {units:.0f}, slowed {deferred:.0f}, "
                 f"refused {refused:.0f}")


def gossip_with(run: Callable[..., Awaitable[None]]) -> Gossip:
    """Adapts ``attack_bench.gossip_from`` (a trio function) to :data:`Gossip`."""
    def send(target: str, wires: list[bytes], channel: str) -> None:
        trio.run(run, target, wires, channel)
    return send
