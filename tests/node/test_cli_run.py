"""``syncnode run`` as a real process: status over the API, stable identity, clean SIGTERM."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.harness.procs import NodeProcess

# Loaded into the node's process (sitecustomize): at exit, after the node stopped and every
# atexit handler of its own ran, say how many objects the interpreter's final garbage
# collections would still have to go through.
_COUNT_AT_EXIT = """
import atexit, gc, sys
atexit.register(lambda: print(f"objects the exit would collect: {len(gc.get_objects())}",
                              file=sys.stderr, flush=True))
"""


@pytest.mark.timeout(120)
def test_the_process_exits_right_after_stopped(tmp_path: Path) -> None:
    """After "stopped" nothing is left to do, but the interpreter's teardown went through the
    node's ~150,000 objects cycle by cycle: 0.4 s for a fresh node (2 s and more for one that
    ran long or on a busy machine). Measured by what is left to collect, not by a clock."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_COUNT_AT_EXIT)
    node = NodeProcess(tmp_path / "n1", env={"PYTHONPATH": f"{hooks}:{ROOT}",
                                             "SYNCNODE_SPARK_ENABLED": "false"}).start()
    assert node.cli("publish", "general", "hello").returncode == 0
    assert node.terminate() == 0
    said = re.findall(r"objects the exit would collect: (\d+)", node.log_tail(400))
    assert said, node.log_tail()
    assert int(said[-1]) < 5_000, said


@pytest.mark.timeout(120)
def test_run_status_restart_and_sigterm(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "n1").start()
    try:
        status = node.status()
        assert status["peer_id"] == node.peer_id
        assert status["peer_id"].startswith("12D3KooW")
        assert status["events"] == 0
        assert status["database"].startswith("sqlite:///")
        assert status["listen_addrs"] and all(
            a.startswith("/ip4/127.0.0.1/tcp/") and a.endswith("/p2p/" + node.peer_id)
            for a in status["listen_addrs"]
        )
        assert status["version"]
        assert status["uptime_s"] >= 0
        metrics = node.get("/metrics")
        assert "# TYPE" in metrics
        assert node.get("/openapi.json")["paths"]["/v1/status"]["get"]["summary"]
    finally:
        code = node.terminate()
    assert code == 0, node.log_tail()
    key = tmp_path / "n1" / "identity.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600

    again = NodeProcess(tmp_path / "n1").start()
    try:
        assert again.status()["peer_id"] == node.peer_id
    finally:
        assert again.terminate() == 0, again.log_tail()


def test_status_without_a_node_is_a_clear_error(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path)
    node.api_url = "http://127.0.0.1:9"
    result = node.cli("status")
    assert result.returncode == 1
    assert result.stderr.startswith("error: no node answering at http://127.0.0.1:9")
