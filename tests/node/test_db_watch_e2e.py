"""Database subscriptions end to end against a real node (in this process; the CLI under test
runs as a process): ``syncnode db watch`` prints each change once, across a restart of the
node (change ids persist, the watch reconnects and resumes after the last one it printed);
``?since=`` resumes; the feed is bounded like the other follows (api.max_follows, 429) and
tells a subscriber it fell behind the changes kept (410) or asks for ids this node has not
reached (409: ids are per node); ``db query --limit --where`` is checked against the table's
schema; a follow writes at most ``api.follow_buffer_bytes`` at a time."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.harness.cluster import metric, wait_for
from tests.harness.inproc import InProcessNode
from tests.harness.ports import reusable_port

TABLES = {"kv": {"columns": {"v": "text", "n": "integer"}}}
ENV = {"SYNCNODE_DB_TABLES": json.dumps(TABLES), "SYNCNODE_API_MAX_FOLLOWS": "2",
       "SYNCNODE_DB_CHANGES_RETAIN": "3"}


def lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    out: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line.rstrip("\n"))
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def next_change(lines: queue.Queue[str | None]) -> dict[str, Any]:
    line = lines.get(timeout=60)
    assert line is not None, "db watch ended early"
    return dict(json.loads(line))


def write(node: InProcessNode, *args: str) -> None:
    result = node.cli("db", *args)
    assert result.returncode == 0, result.stderr


def first_line(node: InProcessNode, since: int, **params: str
               ) -> tuple[int, dict[str, Any] | None]:
    with httpx.stream("GET", f"{node.api_url}/v1/db/kv/changes",
                      params={"since": since, **params}, headers=node.headers,
                      timeout=30) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, response.json()
        for line in response.iter_lines():
            return 200, json.loads(line)
    return 200, None


@pytest.mark.timeout(240)
def test_db_watch_resumes_across_a_node_restart(tmp_path: Path) -> None:
    port = reusable_port()
    node = InProcessNode(tmp_path / "n", "--api", f"127.0.0.1:{port}", env=ENV).start()
    watch: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: "kv" in node.get("/v1/db")["tables"], 60, "kv was not declared")
        watch = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "db", "watch", "kv", "--since", "0", "--json",
             "--count", "4", "--api", node.api_url], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=node.cli_env())
        lines = lines_of(watch)
        write(node, "upsert", "kv", "a", "v=one", "n=1")
        write(node, "upsert", "kv", "b", "v=two", "n=2")
        seen = [next_change(lines), next_change(lines)]
        assert [(c["kind"], c["id"], c["row"]) for c in seen] == [
            ("upsert", "a", {"v": "one", "n": 1}), ("upsert", "b", {"v": "two", "n": 2})]
        assert node.terminate() == 0
        node.start()  # same data dir, same API port: the watch reconnects by itself
        write(node, "update", "kv", "a", "n=10")
        write(node, "delete", "kv", "b")
        seen += [next_change(lines), next_change(lines)]
        assert watch.wait(timeout=60) == 0
        assert [(c["kind"], c["id"]) for c in seen[2:]] == [("upsert", "a"), ("delete", "b")]
        assert seen[2]["row"] == {"v": "one", "n": 10}
        ids = [c["change_id"] for c in seen]
        assert ids == sorted(set(ids)), "a change printed twice or out of order"
        assert lines.get(timeout=10) is None  # nothing more than the four
        # ?since= resumes exactly after a change, after the restart too.
        assert first_line(node, ids[1])[1] == seen[2]
        # The feed has no filter: a where is refused, not silently ignored (it used to stream
        # every change for where=nosuch=1).
        for where in ("nosuch=1", "v=one"):
            status, body = first_line(node, ids[1], where=where)
            assert status == 400 and body is not None and "where" in body["error"], body
        # Four changes with db.changes_retain = 3: the first one is gone, and a subscriber
        # asking for it is told so rather than silently skipping it.
        status, body = first_line(node, 0)
        assert status == 410 and body is not None and "db.changes_retain" in body["error"]
        assert metric(node, "db_changes_gone_total") == 1
        # A since beyond this node's newest change id (an id from another node, a typo) is
        # refused at once, naming the newest id: never a wait that skips changes silently.
        status, body = first_line(node, ids[-1] + 1)
        assert status == 409 and body is not None, (status, body)
        assert f"beyond this node's newest change id {ids[-1]}" in body["error"]
        ahead = node.cli("db", "watch", "kv", "--since", "999", timeout=30)
        assert ahead.returncode == 1, ahead.stdout + ahead.stderr
        assert "since=999 is beyond this node's newest change id" in ahead.stderr
        assert "change ids are per node" in ahead.stderr
        assert metric(node, "db_changes_ahead_total") == 2
        # The newest id itself is accepted: the feed follows from there (headers only: no
        # change comes).
        with httpx.stream("GET", f"{node.api_url}/v1/db/kv/changes", params={"since": ids[-1]},
                          headers=node.headers, timeout=30) as response:
            assert response.status_code == 200
        # The feed takes the follow slots of the other follows (api.max_follows = 2).
        follow = f"{node.api_url}/v1/channels/db/follow"
        with httpx.Client(headers=node.headers, timeout=30) as client, \
                client.stream("GET", follow), client.stream("GET", follow):
            assert first_line(node, ids[1])[0] == 429
        assert metric(node, "api_follows_refused_total") == 1
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        node.kill()


@pytest.mark.timeout(180)
def test_db_query_limit_and_where_and_the_follow_buffer(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "n", env={**ENV, "SYNCNODE_DB_CHANGES_RETAIN": "1000",
                                             "SYNCNODE_API_FOLLOW_BUFFER_BYTES": "2048"}).start()
    try:
        wait_for(lambda: "kv" in node.get("/v1/db")["tables"], 60, "kv was not declared")
        for key, v, n in (("a", "x", 1), ("b", "y", 2), ("c", "x", 2), ("changes", "z", 3)):
            write(node, "upsert", "kv", key, f"v={v}", f"n={n}")

        def query(*args: str) -> subprocess.CompletedProcess[str]:
            return node.cli("db", "query", "kv", "--json", *args)

        def ids(result: subprocess.CompletedProcess[str]) -> list[str]:
            assert result.returncode == 0, result.stderr
            return [json.loads(line)["id"] for line in result.stdout.splitlines()]

        assert ids(query("--where", "v=x")) == ["a", "c"]
        assert ids(query("--where", "v=x", "--where", "n=2")) == ["c"]
        assert ids(query("--where", "n:=2")) == ["b", "c"]
        assert ids(query("--limit", "2")) == ["a", "b"]
        assert ids(query("--where", "id=changes")) == ["changes"]
        for args, said in ((("--where", "nope=1"), "no column 'nope' (columns: id, v, n)"),
                           (("--where", "n=many"), "n is an integer column, got 'many'"),
                           (("--where", "n:=\"2\""), "n is an integer column, got '\"2\"'"),
                           (("--where", "v"), "where: expected COLUMN=VALUE or COLUMN:=JSON")):
            result = query(*args)
            assert result.returncode == 2, (args, result.stdout)
            assert said in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert node.cli("db", "query", "kv", "--limit", "0").returncode == 2
        # An answer from the node ends a watch (only a lost connection is retried).
        unknown = node.cli("db", "watch", "nope", timeout=30)
        assert unknown.returncode != 0 and "no replicated table 'nope'" in unknown.stderr
        # The row named like the feed is still readable by id.
        got = node.cli("db", "get", "kv", "changes", "--json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout) == {"id": "changes", "v": "z", "n": 3}
        # The OpenAPI description has the feed and the filter.
        described = node.get("/openapi.json")["paths"]
        assert "/v1/db/{table}/changes" in described
        params = {p["name"] for p in described["/v1/db/{table}"]["get"]["parameters"]}
        assert {"where", "limit"} <= params
        # A follow writes at most api.follow_buffer_bytes at a time: ~8 changes of ~250 bytes
        # per 2048-byte chunk on the wire, never more.
        with node.client() as client:
            for i in range(40):
                client.post("/v1/db/kv", json={"op": "upsert", "id": f"z{i:02}",
                                               "values": {"v": "x" * 100, "n": 100 + i}})
        sizes = chunk_sizes(node.api_url, "/v1/db/kv/changes?since=0", node.token, 44)
        assert max(sizes) <= 2048, sizes
        assert len(sizes) < 40 and sum(sizes) > 2 * 2048, sizes
    finally:
        node.kill()


def chunk_sizes(api_url: str, path: str, token: str, wanted_lines: int) -> list[int]:
    """The sizes of the HTTP chunks of a follow stream, read off a raw socket until
    ``wanted_lines`` lines came."""
    url = httpx.URL(api_url)
    with socket.create_connection((url.host, url.port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n"
                     f"Authorization: Bearer {token}\r\n\r\n".encode())
        reader = sock.makefile("rb")
        while reader.readline() not in (b"\r\n", b""):
            pass  # the status line and headers
        sizes: list[int] = []
        lines = 0
        while lines < wanted_lines:
            size = int(reader.readline().split(b";")[0], 16)
            body = reader.read(size + 2)[:size]
            sizes.append(size)
            lines += body.count(b"\n")
        return sizes
