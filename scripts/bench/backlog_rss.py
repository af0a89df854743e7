"""Memory of a node's own backlog (issue 31): a real node process, alone (nobody acknowledges),
publishes ``events`` events of ``size`` bytes each through its HTTP API and keeps them in its
SDS outgoing buffer; it resends them and saves its channel state every few seconds meanwhile.
The figure is the process's peak resident set (VmHWM, Linux /proc) over the whole run, with
``hold_s`` seconds after the last publish (at least one resend round and a few state saves).

``run()`` is the measurement (``scripts/bench/backlog_rss_bench.py`` prints it; the cluster
benchmark may call it too); it returns the figures as a dict with ``own_backlog_peak_rss_mib``.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from catchup_log import node_database  # noqa: E402

from storage import get_state  # noqa: E402
from tests.harness.procs import NodeProcess  # noqa: E402

__all__ = ["run"]

CHANNEL = "general"


def _status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _publish(client: httpx.Client, content: bytes) -> str:
    body = {"content_b64": base64.b64encode(content).decode("ascii")}
    r = client.post(f"/v1/channels/{CHANNEL}/events", json=body)
    r.raise_for_status()
    return str(r.json()["message_id"])


def run(events: int = 200, size: int = 500_000, hold_s: float = 25.0,
        base: Path | None = None, config_toml: str = "") -> dict[str, Any]:
    """Start a node, publish ``events`` x ``size`` bytes of its own, hold, measure, stop.
    ``config_toml``: the node's config file (default: none, the defaults)."""
    tmp = Path(tempfile.mkdtemp(prefix="syncnode-backlog-", dir=base))
    config = None
    if config_toml:
        config = tmp / "node.toml"
        config.write_text(config_toml)
    node = NodeProcess(tmp / "node", config=config)
    node.start(timeout=120.0)
    assert node.proc is not None
    pid = node.proc.pid
    rng = random.Random(31)
    started = time.monotonic()
    try:
        idle_rss = _status_mib(pid, "VmRSS")
        with httpx.Client(base_url=node.api_url, timeout=120,
                          headers={"Authorization": f"Bearer {node.token}"}) as client:
            ids = [_publish(client, rng.randbytes(size)) for _ in range(events)]
            published_s = time.monotonic() - started
            deadline = time.monotonic() + hold_s
            end_rss = 0.0
            while time.monotonic() < deadline:
                time.sleep(0.5)
                end_rss = _status_mib(pid, "VmRSS")
        peak = _status_mib(pid, "VmHWM")
    finally:
        # SIGTERM: the node saves its channel state on the way out (the figure we report).
        node.proc.terminate()
        try:
            node.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
    engine = node_database(tmp / "node")
    try:
        with engine.connect() as conn:
            state = get_state(conn, f"sds/{CHANNEL}") or b""
    finally:
        engine.dispose()
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "own_backlog_peak_rss_mib": round(peak, 1),
        "own_backlog_idle_rss_mib": round(idle_rss, 1),
        "own_backlog_end_rss_mib": round(end_rss, 1),
        "own_backlog_events": len(ids),
        "own_backlog_event_bytes": size,
        "own_backlog_publish_s": round(published_s, 1),
        "own_backlog_state_bytes": len(state),
        "own_backlog_load": round(os.getloadavg()[0], 2),
    }
