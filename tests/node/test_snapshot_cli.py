"""``snapshot rebuild --wait`` and ``snapshot status`` explain what a build left out, and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.node.procs import NodeProcess


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_rebuild_right_after_publishing_says_what_waits_and_until_when(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[spark]\nmaster = "local[1]"\npartitions = 1\ndriver_memory = "512m"\n')
    node = NodeProcess(tmp_path / "n", config=config).start()
    try:
        for i in range(3):
            assert node.cli("publish", "general", f"event {i}").returncode == 0
        # Not a terminal: a line per phase, not one per poll.
        rebuilt = node.cli("snapshot", "rebuild", "--wait", timeout=300)
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        lines = rebuilt.stdout.splitlines()
        assert not any("[" in x and "%" in x for x in lines), rebuilt.stdout  # no bars
        assert len([x for x in lines if x.endswith(" ...")]) <= 6, rebuilt.stdout
        # The settle time is explained: 3 events wait, with the time a rebuild includes them.
        assert "written: 0 events in 0 record files" in rebuilt.stdout
        left = next(x for x in lines if "left out:" in x)
        assert "left out: 3 events in periods that ended less than settle_ms=60000 ago" in left
        assert "a rebuild after 20" in left and "Z includes them" in left
        status = node.cli("snapshot", "status")
        assert status.returncode == 0 and left.strip() in status.stdout
        as_json = json.loads(node.cli("snapshot", "status", "--json").stdout)
        result = as_json["last"]["jobs"][0]["result"]
        assert result["pending_events"] == 3 and result["pending_until_ms"] > 0
    finally:
        node.terminate()
