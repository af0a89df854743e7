"""Idempotent publishes against a real node: a repeated ``Idempotency-Key`` never makes a second
event, across concurrent requests and a restart, and the CLI's retries rely on it. (The nodes run
in the test's process, their restarts from the same data dir after a clean stop: the keys are
the node's database's, not a process's; the CLI runs as a process.)"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from tests.harness.inproc import InProcessNode
from tests.harness.raw_http import read_message

pytestmark = pytest.mark.timeout(180)


def _contents(node: InProcessNode) -> list[str]:
    return [e["content"] for e in node.get("/v1/channels/general/events")["events"]]


def _publish(node: InProcessNode, content: str, key: str) -> httpx.Response:
    return httpx.post(node.api_url + "/v1/channels/general/events", json={"content": content},
                      headers={**node.headers, "Idempotency-Key": key}, timeout=30)


def test_repeated_key_returns_the_first_answer(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "n").start()
    try:
        first = _publish(node, "once", "key-1")
        again = _publish(node, "once", "key-1")
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true"
        other = _publish(node, "different", "key-1")
        assert other.status_code == 422 and "Idempotency-Key" in other.json()["error"]
        bad = _publish(node, "x", "has space")
        assert bad.status_code == 400

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda _: _publish(node, "racing", "key-2"), range(32)))
        assert {a.status_code for a in answers} == {200}
        assert len({a.json()["message_id"] for a in answers}) == 1
        assert _contents(node).count("once") == 1
        assert _contents(node).count("racing") == 1
        assert "different" not in _contents(node)
    finally:
        assert node.terminate() == 0, node.log_tail()
    restarted = InProcessNode(tmp_path / "n").start()
    try:
        after = _publish(restarted, "once", "key-1")
        assert after.status_code == 200 and after.json() == first.json()
        assert _contents(restarted).count("once") == 1
    finally:
        restarted.kill()


class DroppingProxy:
    """Relays HTTP/1.1 requests to the node (with the node's Host), but swallows the answer to
    the first one and closes the connection: the publish commits, the client sees it break."""

    def __init__(self, target: str) -> None:
        self.target_host, port = target.removeprefix("http://").rsplit(":", 1)
        self.target_port = int(port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with client:
            message = read_message(client)
            if message is None:
                return
            head, body = message
            head = re.sub(rb"(?im)^host:.*$",
                          f"Host: {self.target_host}:{self.target_port}".encode(), head)
            head = re.sub(rb"(?im)^connection:.*\r\n", b"", head) + b"\r\nConnection: close"
            with socket.create_connection((self.target_host, self.target_port)) as upstream:
                upstream.sendall(head + b"\r\n\r\n" + body)
                answer = b""
                while chunk := upstream.recv(65536):
                    answer += chunk
            self.requests += 1
            if self.requests == 1:
                return  # dropped: the client's connection closes without an answer
            client.sendall(answer)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[InProcessNode]:
    started = InProcessNode(tmp_path / "n").start()
    try:
        yield started
    finally:
        started.kill()


def test_cli_retries_a_broken_publish_with_the_same_key(node: InProcessNode) -> None:
    proxy = DroppingProxy(node.api_url)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "node.cli", "publish", "general", "through a flaky link",
             "--api", f"http://127.0.0.1:{proxy.port}"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, env=node.cli_env())
    finally:
        proxy.close()
    assert result.returncode == 0, result.stderr
    assert proxy.requests == 2  # the first answer was lost, the retry got the original
    message_id = result.stdout.strip()
    events = node.get("/v1/channels/general/events")["events"]
    assert [e["message_id"] for e in events if e["content"] == "through a flaky link"] == [
        message_id]


def _evicted(node: InProcessNode) -> float:
    line = next(line for line in node.get("/metrics").splitlines()
                if line.startswith("syncnode_api_idempotency_keys_evicted_total "))
    return float(line.split()[1])


def test_at_most_max_keys_are_held_oldest_forgotten_first(tmp_path: Path) -> None:
    env = {"SYNCNODE_API_IDEMPOTENCY_MAX_KEYS": "10"}
    node = InProcessNode(tmp_path / "n", env=env).start()
    try:
        first = {i: _publish(node, f"c{i}", f"key-{i:02d}").json() for i in range(12)}
        assert _evicted(node) == 2
        kept = _publish(node, "c2", "key-02")
        assert kept.headers.get("idempotent-replayed") == "true" and kept.json() == first[2]
        forgotten = _publish(node, "c0", "key-00")  # evicted: publishes again
        assert "idempotent-replayed" not in forgotten.headers
        assert forgotten.json()["message_id"] != first[0]["message_id"]
        assert _evicted(node) == 3  # key-00 is held again, so key-02 (now the oldest) went
        assert "idempotent-replayed" not in _publish(node, "c1", "key-01").headers
        assert _evicted(node) == 4
    finally:
        assert node.terminate() == 0, node.log_tail()
    # After a restart the keys held are counted in the database before the cap is applied.
    node = InProcessNode(tmp_path / "n", env=env).start()
    try:
        assert _evicted(node) == 0
        _publish(node, "c12", "key-12")  # 11 held: key-04 goes
        assert _evicted(node) == 1
        assert "idempotent-replayed" not in _publish(node, "c3", "key-03").headers
        assert _evicted(node) == 2  # key-05 went
        replay = _publish(node, "c6", "key-06")
        assert replay.headers.get("idempotent-replayed") == "true"
        assert replay.json() == first[6]
        assert "idempotent-replayed" not in _publish(node, "c5", "key-05").headers
        assert _contents(node).count("c0") == 2 and _contents(node).count("c11") == 1
    finally:
        node.kill()
