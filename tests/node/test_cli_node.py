"""The client commands against two real nodes: join, peers, publish, log (and --follow). (The
nodes run in the test's process; the commands under test are processes of their own.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.harness.cluster import fast_inproc, wait_for
from tests.harness.procs import start_all

pytestmark = pytest.mark.timeout(180)


def test_join_publish_and_log_through_the_cli(tmp_path: Path) -> None:
    a, b = start_all([fast_inproc(tmp_path, "a"), fast_inproc(tmp_path, "b")])
    try:
        joined = b.cli("join", a.listen_addrs[0])
        assert joined.returncode == 0, joined.stderr
        assert joined.stdout.strip() == f"joined {a.peer_id}"
        peers = json.loads(b.cli("peers", "--json").stdout)
        assert [p["peer_id"] for p in peers["connected"]] == [a.peer_id]
        assert peers["known"] == [a.peer_id]

        first = a.cli("publish", "general", "hello from a")
        second = b.cli("publish", "general", "-", input="from stdin\n")
        assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
        ids = {first.stdout.strip(), second.stdout.strip()}
        assert all(len(i) == 64 for i in ids)

        def both_logged() -> bool:
            out = b.cli("log", "general", "--json").stdout.splitlines()
            return {json.loads(line)["message_id"] for line in out} == ids

        wait_for(both_logged, 30, "events did not reach b")
        lines = [json.loads(x) for x in b.cli("log", "general", "--json").stdout.splitlines()]
        assert set(lines[0]) == {"message_id", "sender", "lamport", "content"}
        # `publish -` strips one trailing newline (README).
        assert {x["content"] for x in lines} == {"hello from a", "from stdin"}
        assert lines == sorted(lines, key=lambda x: (x["lamport"], x["message_id"]))
        text = a.cli("log", "general").stdout
        assert "hello from a" in text

        follower = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "log", "general", "--follow", "--api", b.api_url],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, env=b.cli_env(),
        )
        try:
            assert follower.stdout is not None
            seen = [follower.stdout.readline() for _ in range(2)]  # the existing log
            assert all(seen)
            a.cli("publish", "general", "live event")
            line = follower.stdout.readline()
            assert "live event" in line
        finally:
            follower.kill()
            follower.wait()

        bad = b.cli("publish", "nochannel", "x")
        assert bad.returncode == 1
        assert "unknown channel 'nochannel'" in bad.stderr
    finally:
        a.kill()
        b.kill()
