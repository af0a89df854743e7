"""A publish burst cut short by SIGKILL, for the tests and the benchmark of what a node's peers
go through when it dies mid-burst and comes back (issue 37)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.node.procs import NodeProcess


def events_held(node: NodeProcess) -> int:
    """How many events the node's log holds."""
    return int(node.get("/v1/status")["events"])


def burst_and_kill(node: NodeProcess, count: int, kill_after: int, workdir: Path,
                   channel: str = "general") -> None:
    """Publish ``count`` lines on ``node`` (``syncnode publish --lines``) and kill the node with
    SIGKILL as soon as its log holds ``kill_after`` events (or the burst ended first)."""
    lines = workdir / "burst.txt"
    lines.write_text("".join(f"burst event {i:06d}\n" for i in range(count)))
    publisher = subprocess.Popen(node.cli_command("publish", channel, "--lines", str(lines)),
                                 cwd=ROOT, env=node.cli_env(), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    try:
        while events_held(node) < kill_after and publisher.poll() is None:
            time.sleep(0.02)
        node.kill()
    finally:
        publisher.kill()
        publisher.wait(timeout=30)
