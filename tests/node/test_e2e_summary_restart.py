"""A node restarts from its saved Recon key store summary (plus newer keys) and still serves
the right keys: after a SIGKILL between saves, a peer that missed the newest events gets them
through Recon, which it could not if the restored summary left them out (equal range hashes).
(a, killed and read from its log, is a node process; its peer b runs in this process.)"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.harness.cluster import (
    channel_log,
    metric,
    publish_many,
    start_inproc,
    start_node,
    wait_for,
)
from tests.harness.procs import NodeApi
from tests.pg import reset_postgres

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
FIRST, LATER = 120, 25
NO_PERIODIC = {"SYNCNODE_RECON_SUMMARY_SAVE_INTERVAL_S": "3600"}


def _loads(node_log: Path) -> list[tuple[str, int]]:
    """(outcome, replayed) of each start-up's key store, from the node's log."""
    found = re.findall(r"recon key store loaded.*?outcome=(\w+).*?replayed=(\d+)",
                       node_log.read_text())
    return [(outcome, int(replayed)) for outcome, replayed in found]


def _backends() -> list[str]:
    return ["sqlite", *(["postgresql"] if os.environ.get("SYNCNODE_TEST_PG") else [])]


@pytest.mark.parametrize("backend", _backends())
def test_restart_after_sigkill_between_saves_serves_the_right_keys(
    tmp_path: Path, backend: str
) -> None:
    a_env = dict(NO_PERIODIC)
    if backend == "postgresql":  # the restarted node's database (the other stays on SQLite)
        reset_postgres(os.environ["SYNCNODE_TEST_PG"])
        a_env["SYNCNODE_STORAGE_URL"] = os.environ["SYNCNODE_TEST_PG"]
    nodes: list[NodeApi] = []
    try:
        a = start_node(tmp_path, "n0", env=a_env)
        nodes.append(a)
        b = start_inproc(tmp_path, "n1", env=NO_PERIODIC, bootstrap=[a])
        nodes.append(b)
        publish_many(a, "general", [f"first {i}" for i in range(FIRST)])
        wait_for(lambda: len(channel_log(b, "general")) == FIRST, 60, "b did not get them")
        b.terminate()
        a.terminate()  # clean shutdown: the summary is saved with its watermark
        a.start()
        assert metric(a, "recon_summary_loads_total") == 1
        publish_many(a, "general", [f"later {i}" for i in range(LATER)])
        a.kill()  # no save since the clean shutdown: the newest events are above the watermark
        a.env = {**a.env, "SYNCNODE_RECON_SUMMARY_SAVE_INTERVAL_S": "1"}
        a.start()
        assert _loads(a.stderr_path)[-3:] == [("scan_missing", 0), ("saved", 0),
                                              ("saved", LATER)]
        wait_for(lambda: metric(a, "recon_summary_saves_total") >= 1, 30, "no periodic save")
        # b held the first events only: its range hashes equal a's unless a counts the later.
        b2 = start_inproc(tmp_path, "n1", env=NO_PERIODIC, bootstrap=[a])
        nodes.append(b2)
        wait_for(lambda: len(channel_log(b2, "general")) == FIRST + LATER, 60,
                 "b did not get the later events")
        assert metric(b2, "recon_events_fetched_total") >= LATER
        assert sorted(channel_log(b2, "general")) == sorted(channel_log(a, "general"))
    finally:
        for node in nodes:
            node.kill()
