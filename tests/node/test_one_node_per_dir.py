"""One node per data dir and per port: the second one stops at once with one ``error:`` line."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.harness.procs import NodeProcess
from tests.node.test_cli_errors import assert_one_error


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "node.cli", *args], cwd=ROOT,
                          capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.timeout(180)
def test_second_node_on_a_data_dir_or_port_is_refused(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "a").start()
    try:
        assert node.proc is not None
        p2p_port = node.listen_addrs[0].split("/")[4]
        api_port = node.api_url.rsplit(":", 1)[1]
        snap = tmp_path / "snap"
        snap.mkdir()
        # (arguments, what the one error line names): each refused the same way whichever
        # runs first, so they run side by side (a CLI process's start-up each).
        refused = [
            # Same data dir: kubo's repo.lock, naming the PID that holds it.
            (("run", "--data-dir", str(node.data_dir), "--api", "127.0.0.1:0",
              "--listen", "/ip4/127.0.0.1/tcp/0"), f"pid {node.proc.pid}"),
            # Same P2P port, another data dir: no SO_REUSEPORT, so the bind fails.
            (("run", "--data-dir", str(tmp_path / "b"), "--api", "127.0.0.1:0",
              "--listen", f"/ip4/127.0.0.1/tcp/{p2p_port}"),
             f"cannot listen on p2p.listen /ip4/127.0.0.1/tcp/{p2p_port}"),
            # Same API port.
            (("run", "--data-dir", str(tmp_path / "c"), "--api", f"127.0.0.1:{api_port}",
              "--listen", "/ip4/127.0.0.1/tcp/0"),
             f"cannot listen on api.listen 127.0.0.1:{api_port}"),
            # Offline commands that write the database refuse a running node's data dir.
            *(((*args, "--data-dir", str(node.data_dir)), f"pid {node.proc.pid}")
              for args in (("snapshot", "pull", str(snap)),
                           ("bootstrap", "--from-snapshot", str(snap)))),
        ]
        with ThreadPoolExecutor(len(refused)) as pool:
            results = list(pool.map(lambda case: run(*case[0]), refused))
        lines = [assert_one_error(result, 1, fragment)
                 for result, (_, fragment) in zip(results, refused, strict=True)]
        assert "repo.lock" in lines[0]
        # The running node is untouched by all of this.
        assert node.status()["peer_id"] == node.peer_id
    finally:
        assert node.terminate() == 0, node.log_tail()
    # The lock goes with the process: the same data dir starts again.
    again = NodeProcess(tmp_path / "a").start()
    try:
        assert again.peer_id == node.peer_id
    finally:
        # A killed node's lock is released by the kernel (no stale lock to clean by hand).
        again.kill()
    after = NodeProcess(tmp_path / "a").start()
    assert after.terminate() == 0, after.log_tail()
