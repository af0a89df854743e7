"""Sync status with real nodes on the default settings: a node that was offline while its peer
published a few thousand events restarts, says it is behind (per peer and in total, in
``/v1/status``, ``status`` and ``peers``), then in sync; ``status --wait-synced`` returns once
it holds every event, and says what it waits for when it gives up. (The nodes run in this
process, a restart being a clean stop and start on the node's data dir; the CLI under test
runs as a process.)"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import wait_for
from tests.harness.inproc import InProcessNode

EVENTS = 10_000  # enough that the catch-up lasts longer than a few polls
GAUGE = "syncnode_sync_behind_events"


def gauge(text: str) -> float | None:
    """The gauge's value in a /metrics text (None: not served yet, the node is starting)."""
    return next((float(line.split()[1]) for line in text.splitlines()
                 if line.startswith(GAUGE + " ")), None)


def sync_of(node: InProcessNode) -> dict[str, Any]:
    return dict(node.get("/v1/status")["sync"])


class Watcher:
    """Polls a node's ``/v1/status`` in a thread and keeps every sync state it saw."""

    def __init__(self, node: InProcessNode) -> None:
        self.node = node
        self.seen: list[dict[str, Any]] = []
        self.gauges: list[float | None] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self.node.client() as client:
            while not self._stop.is_set():
                try:
                    self.seen.append(client.get("/v1/status").json()["sync"])
                    self.gauges.append(gauge(client.get("/metrics").text))
                except Exception as exc:  # any: the story says why a state was missed
                    self.errors.append(repr(exc))
                self._stop.wait(0.05)

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.seen

    def story(self) -> str:
        """The states seen, each run of equal texts once, with the errors met."""
        texts = [s["text"] for s in self.seen]
        runs = [t for i, t in enumerate(texts) if i == 0 or texts[i - 1] != t]
        return f"{len(texts)} samples: {runs[:12]} ... {runs[-6:]}; errors {self.errors[:3]}"


@pytest.mark.timeout(300)
def test_a_restarted_node_says_it_is_behind_then_in_sync_and_wait_synced_returns(
        tmp_path: Path) -> None:
    # b, the node under test, runs the default settings (no fast timers). a does not resend
    # its unacknowledged events (SDS resends, a second way back for them, race b's first Recon
    # round: when they win, b holds everything before Recon could tell it was behind).
    a = InProcessNode(tmp_path / "a", env={"SYNCNODE_SDS_MAX_RESENDS": "0"}).start()
    b = InProcessNode(tmp_path / "b", "--bootstrap", a.listen_addrs[0])
    try:
        b.start()
        wait_for(lambda: sync_of(b)["state"] == "in_sync", 60, "b never in sync with a")
        assert b.terminate() == 0
        lines = tmp_path / "burst.txt"
        lines.write_text("".join(f"event {i}\n" for i in range(EVENTS)))
        published = a.cli("publish", "general", "--lines", str(lines), timeout=120)
        assert published.returncode == 0, published.stderr
        total = a.status()["events"]
        assert total >= EVENTS

        b.start()
        watcher = Watcher(b)
        waiting = subprocess.Popen(
            b.cli_command("status", "--wait-synced", "--timeout", "120", "--json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=b.cli_env())
        try:
            out, err = waiting.communicate(timeout=180)
        finally:
            waiting.kill()
            seen = watcher.stop()
        # The watcher polls every 50 ms at best: the state the wait returned on is read here.
        seen.append(sync_of(b))
        # It returned in sync, and b holds every event then.
        assert waiting.returncode == 0, err
        assert '"state": "in_sync"' in out
        assert b.status()["events"] == total
        # On its way it said it was behind, per peer and in total, and by how much.
        behind = [s for s in seen if s["state"] == "behind"]
        assert behind, watcher.story()
        first = behind[0]
        assert 0 < first["behind"] <= EVENTS
        assert re.fullmatch(r"behind ~\d+ events(, catching up at \d+/s)?", first["text"])
        assert first["peers"][a.peer_id]["behind"] == first["behind"]
        assert first["peers"][a.peer_id]["measured"] > 0
        assert seen.index(first) < max(i for i, s in enumerate(seen) if s["state"] == "in_sync")
        assert max(g or 0 for g in watcher.gauges) > 0 and gauge(b.get("/metrics")) == 0
        # Once in sync, every way of looking says so.
        assert sync_of(b)["peers"][a.peer_id]["behind"] == 0
        status = b.cli("status")
        assert status.returncode == 0, status.stderr
        assert re.search(r"^sync +in sync$", status.stdout, re.M), status.stdout
        assert re.search(rf"^  {a.peer_id[-12:]} +in sync, reconciled .* ago$", status.stdout,
                         re.M), status.stdout
        peers = b.cli("peers")
        assert peers.returncode == 0 and "in sync" in peers.stdout, peers.stdout
        peer = b.get("/v1/peers")["connected"][0]
        assert peer["peer_id"] == a.peer_id and peer["sync"]["behind"] == 0

        # The peer gone: the wait gives up after --timeout with one line saying why.
        assert a.terminate() == 0
        wait_for(lambda: not b.get("/v1/peers")["connected"], 60, "a still connected")
        started = time.monotonic()
        gave_up = b.cli("status", "--wait-synced", "--timeout", "2")
        assert gave_up.returncode == 1
        assert gave_up.stderr.strip() == ("error: not in sync after 2 s: unknown (no peer "
                                          "connected)"), gave_up.stderr
        assert time.monotonic() - started >= 2
        with b.client() as client:
            answer = client.get("/v1/status", params={"wait_synced": 1})
            assert answer.status_code == 200 and answer.json()["sync"]["state"] == "unknown"
            assert client.get("/v1/status", params={"wait_synced": 99_999}).status_code == 400
    finally:
        b.kill()
        a.kill()


def test_status_and_peers_text_for_each_state() -> None:
    from node.cli.node_commands import peer_summary, sync_rows

    behind = {"state": "behind", "text": "behind ~3412 events, catching up at 5120/s",
              "behind": 3412, "rate_per_s": 5120.0, "eta_s": 0.7,
              "peers": {"12D3KooWpeerAAAAX4xGm8UuK2aB": {
                  "behind": 3412, "measured": 4000, "reconciled_ago_s": 0.4,
                  "partial": False}}}
    assert sync_rows(behind) == [
        ("sync", "behind ~3412 events, catching up at 5120/s (about 0.7 s left)"),
        ("  X4xGm8UuK2aB", "behind ~3412, reconciled 0.4 s ago")]
    unknown = {"state": "unknown", "text": "unknown (no peer connected)", "behind": 0,
               "rate_per_s": None, "eta_s": None, "peers": {}}
    assert sync_rows(unknown) == [("sync", "unknown (no peer connected)")]
    peer = {"path": "direct", "rtt_ms": 1.0, "last_recon": None, "sync": None}
    assert peer_summary(peer).endswith("  sync unknown")
    assert peer_summary({**peer, "sync": {"behind": 0}}).endswith("  in sync")
    assert peer_summary({**peer, "sync": {"behind": 7}}).endswith("  behind ~7")
