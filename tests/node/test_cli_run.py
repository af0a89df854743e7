"""``syncnode run`` as a real process: status over the API, stable identity, clean SIGTERM."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.node.procs import NodeProcess


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
