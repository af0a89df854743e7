"""The in-process node runner (tests.harness.inproc): several full nodes started at once in one
process replicate, and stop cleanly."""

from __future__ import annotations

from pathlib import Path

from tests.harness.cluster import channel_log, cluster, metric, publish_many, wait_for


def test_three_nodes_started_at_once_in_one_process_replicate(tmp_path: Path) -> None:
    # Started at once, the nodes migrate their databases at the same moment: Alembic's
    # process-wide proxies made that fail ("no such table") before storage.migrate took turns.
    with cluster(tmp_path, 3, in_process=True) as nodes:
        assert len({n.peer_id for n in nodes}) == 3
        sent = publish_many(nodes[0], "general", [f"m{i}" for i in range(20)])
        wait_for(lambda: all(len(channel_log(n, "general")) == 20 for n in nodes), 60,
                 "the three logs did not fill")
        logs = [channel_log(n, "general") for n in nodes]
        assert logs[0] == logs[1] == logs[2]
        assert {m for _, m, _ in logs[0]} == set(sent)
        assert metric(nodes[2], "events_stored_total") >= 20
    for node in nodes:
        assert not node.alive() and node.error is None
