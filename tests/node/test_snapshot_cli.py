"""``snapshot rebuild --wait`` and ``snapshot status`` explain what a build left out, and why.
(The events are published through the API: the CLI under test is ``snapshot``'s. The node runs
in this process; its Spark jobs and the CLI run as processes.)"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import publish_many
from tests.harness.inproc import InProcessNode


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_rebuild_right_after_publishing_says_what_waits_and_until_when(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[spark]\nmaster = "local[1]"\npartitions = 1\ndriver_memory = "512m"\n')
    node = InProcessNode(tmp_path / "n", config=config).start()
    try:
        publish_many(node, "general", [f"event {i}" for i in range(3)], threads=1)
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
        # One period holds them, or (published across a minute boundary) two: then the line
        # says how many the first rebuild takes and when all are in.
        assert re.search(r"a rebuild after 20\S+Z includes (them|\d of them, one after 20\S+Z "
                         r"all of them) ", left), left
        status = node.cli("snapshot", "status")
        assert status.returncode == 0 and left.strip() in status.stdout
        as_json = json.loads(node.cli("snapshot", "status", "--json").stdout)
        result = as_json["last"]["jobs"][0]["result"]
        assert result["pending_events"] == 3 and result["pending_until_ms"] > 0
        # Nothing settled to write: known from the manifest and the database, without Spark.
        assert result["spark"] is False
    finally:
        node.terminate()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_rebuild_progress_follows_the_phases_and_an_unchanged_log_answers_at_once(
    tmp_path: Path,
) -> None:
    # Issue 29: the bar sat at "0% snapshot 0/0" for ~10 s, then jumped to 100%; a rebuild with
    # nothing new took ~30 s (Spark started anyway).
    config = tmp_path / "c.toml"
    config.write_text('[spark]\nmaster = "local[1]"\npartitions = 1\ndriver_memory = "512m"\n'
                      "period_ms = 1000\nsettle_ms = 0\n")
    node = InProcessNode(tmp_path / "n", config=config).start()
    try:
        publish_many(node, "general", [f"event {i}" for i in range(5)], threads=1)
        time.sleep(1.2)  # the events' one-second periods close (settle_ms = 0)
        seen: list[dict[str, Any]] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                progress = node.get("/v1/snapshots/status").get("progress")
                if progress and (not seen or progress != seen[-1]):
                    seen.append(progress)
                done.wait(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        rebuilt = node.cli("snapshot", "rebuild", "--wait", timeout=300)
        done.set()
        watcher.join()
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        assert "written: 5 events in" in rebuilt.stdout, rebuilt.stdout
        phases = [p["phase"] for p in seen]
        # The job's own phases, in order, each a step of the whole (not 0% until the end).
        order = ["snapshot:plan", "snapshot:start-spark", "snapshot:encode", "snapshot:write",
                 "snapshot:tree"]
        steps = [order.index(p) for p in phases if p in order]
        assert steps == sorted(steps), phases  # (a short phase may pass between two polls)
        assert "snapshot:start-spark" in phases and len(set(steps)) >= 3, phases
        fractions = [p["fraction"] for p in seen if p["phase"] != "snapshot:starting"]
        assert fractions == sorted(fractions), seen  # never backwards
        assert any(0.1 < f < 0.9 for f in fractions), seen  # and in between, not 0 then 100
        assert all(p["steps"] == 6 for p in seen if p["phase"] != "snapshot:starting"), seen
        runs = node.get("/v1/snapshots/status")["runs"]
        # Nothing new: the answer comes at once, no job starts.
        again = node.cli("snapshot", "rebuild", "--wait", timeout=60)
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("snapshot up to date: nothing new since the last build")
        assert "Spark was not started" in again.stdout
        assert "holds: 5 events in" in again.stdout  # what the snapshot holds
        status = node.get("/v1/snapshots/status")
        assert status["runs"] == runs + 1 and not status["running"]
        assert status["last"]["unchanged"] is True
        # A new event makes the next rebuild a real one.
        publish_many(node, "general", ["one more"])
        answer = node.post("/v1/snapshots", {})
        assert answer["unchanged"] is False
    finally:
        node.terminate()
