"""One clock for the daemon: no driver of ``node/`` reads time itself or builds its own clock.

The daemon's entry (``node.node_main``) builds the one :class:`node.clock.SystemClock` and
``serve`` hands it down; every driver takes it as a required parameter, so a test can run the
daemon's services on trio's ``MockClock``. This scan fails when a direct time read
(``time.time()``, ``time.monotonic()``, ``trio.current_time()``, ...; a reference counts too,
``clock=time.monotonic``), a ``SystemClock`` or a ``clock or ...`` fallback (the old
``clock or SystemClock()``, ``clock or host.clock``) appears in ``node/`` outside ``ALLOWED``,
and when an allowance is no longer used (lower it). ``node/cli`` is the client, a process of
its own: its waits and printouts are on real time.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "node"
CLIENT = NODE / "cli"

TIME_READS = frozenset({
    "time.time", "time.time_ns", "time.monotonic", "time.monotonic_ns", "time.perf_counter",
    "time.perf_counter_ns", "trio.current_time", "datetime.now", "datetime.utcnow",
    "datetime.datetime.now", "datetime.datetime.utcnow", "date.today",
})
TIME_MODULES = frozenset({"time", "datetime"})

# (file under node/, what it names): how many times, each with its reason at the site.
ALLOWED: dict[tuple[str, str], int] = {
    ("clock.py", "time.time"): 1,  # SystemClock.wall: the one wall clock
    ("clock.py", "trio.current_time"): 3,  # SystemClock.now, TrioWallClock
    ("node_main.py", "SystemClock"): 1,  # the daemon's entry builds the one clock
    # A seqno counter must not repeat across restarts: libp2p's rule, on the wall clock.
    ("p2p/compat/pubsub.py", "time.time_ns"): 1,
    # libp2p stamps its validation results with time.time(): their age is read on that clock.
    ("p2p/compat/validation.py", "time.time"): 2,
    # `syncnode snapshot bootstrap/pull`: a CLI tool on a stopped node's database.
    ("snapshots/bootstrap.py", "time.time"): 2,
    ("snapshots/bootstrap.py", "time.monotonic"): 2,
    # The worker's commit path runs in a thread, where trio's clock cannot be read.
    ("store/commits.py", "time.time"): 2,
    ("store/commits.py", "trio.current_time"): 1,
    # Worker threads: trio's clock cannot be read there (their pacing is real time).
    ("apps/db_app.py", "time.monotonic"): 4,
    # A collection stops every thread and runs in any of them: CPU time stopped, not a time
    # the cores compare.
    ("telemetry/gc_pauses.py", "time.perf_counter"): 2,
}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return f"{owner}.{node.attr}" if owner else None
    return None


def uses(source: str) -> Counter[str]:
    """The time reads and ``SystemClock`` references in one module's source."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in TIME_MODULES | {"trio"}:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if name in TIME_READS or name == "datetime.datetime":
                    found[f"from-import {name}"] += 1  # a bare `monotonic()` would escape
        elif isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name in TIME_READS:
                found[name] += 1
        elif isinstance(node, ast.Name) and node.id == "SystemClock":
            found["SystemClock"] += 1
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and any(
                "clock" in (_dotted(v) or "").lower() for v in node.values):
            found["clock or ..."] += 1  # an optional clock with a default of its own
    return found


def scan() -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(NODE.rglob("*.py")):
        if CLIENT in path.parents:
            continue
        for name, count in uses(path.read_text()).items():
            found[(path.relative_to(NODE).as_posix(), name)] += count
    return found


def test_no_new_time_read_or_clock_fallback() -> None:
    found = scan()
    new = {k: n for k, n in found.items() if n > ALLOWED.get(k, 0)}
    assert not new, (
        "node/ reads time or builds a clock outside the allowed list: take the injected clock "
        f"(node.clock.Clock) instead, or add the site to ALLOWED with its reason: {new}")
    stale = {k: (n, found.get(k, 0)) for k, n in ALLOWED.items() if found.get(k, 0) < n}
    assert not stale, f"allowances no longer used (allowed, found): lower them: {stale}"


def test_the_scan_sees_each_form() -> None:
    source = """
import time, trio
from time import monotonic
def f(clock=None, read=time.monotonic):
    clock = clock or SystemClock()
    self.clock = clock or host.clock
    return time.time() + trio.current_time() + datetime.datetime.now().timestamp()
"""
    assert uses(source) == Counter({
        "from-import time.monotonic": 1, "time.monotonic": 1, "SystemClock": 1, "time.time": 1,
        "trio.current_time": 1, "datetime.datetime.now": 1, "clock or ...": 2})
