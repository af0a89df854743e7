"""The API bounds what a client can make the node hold, and answers bad input with one 4xx line.

Against a real node process over real HTTP (raw sockets where a client must misbehave).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.harness.cluster import metric, wait_for
from tests.harness.procs import NodeProcess, running_node

pytestmark = pytest.mark.timeout(180)

LIMITS = {
    "SYNCNODE_API_BODY_TIMEOUT_S": "2",
    "SYNCNODE_API_IDLE_TIMEOUT_S": "2",
    "SYNCNODE_API_PAGE_MAX_BYTES": str(1024 * 1024),
    "SYNCNODE_API_MAX_FOLLOWS": "2",
    "SYNCNODE_P2P_CHANNELS": "general,big",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    yield from running_node(tmp_path_factory.mktemp("bounds"), LIMITS)


def _proc_status(node: NodeProcess, field: str) -> int:
    assert node.proc is not None
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


def _one_line_4xx(response: httpx.Response) -> str:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    message = response.json()["error"]
    assert isinstance(message, str) and message and "\n" not in message
    return str(message)


def test_bad_input_is_a_4xx_with_one_line(node: NodeProcess) -> None:
    publish = node.api_url + "/v1/channels/general/events"
    headers = {**node.headers, "Content-Type": "application/json"}
    before_5xx = metric(node, "api_responses_total")
    surrogate = httpx.post(publish, content=b'{"content": "\\ud800"}', headers=headers)
    assert "surrogate" in _one_line_4xx(surrogate)
    deep = b"[" * 100_000 + b"]" * 100_000
    assert "nested" in _one_line_4xx(httpx.post(publish, content=deep, headers=headers))
    deep_obj = b'{"content": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001
    assert "nested" in _one_line_4xx(httpx.post(publish, content=deep_obj, headers=headers))
    big = str(2**63)
    for path, params in [
        ("/v1/channels/general/events", {"after_lamport": big}),
        ("/v1/channels/general/events", {"order": "seq", "after": big}),
        ("/v1/channels/general/events", {"limit": "1e3"}),
        ("/v1/channels/general/follow", {"after": "1e20"}),
        ("/v1/channels/general/follow", {"after": "1" + "0" * 20}),
        ("/v1/channels/general/follow", {"after": "-1"}),
    ]:
        r = httpx.get(node.api_url + path, params=params, headers=node.headers, timeout=10)
        assert "query parameter" in _one_line_4xx(r), (path, params)
    for method, path in (("GET", "/v1/nope"), ("DELETE", "/v1/status")):
        r = httpx.request(method, node.api_url + path, headers=node.headers)
        assert "openapi" in _one_line_4xx(r), (method, path)
    # Nothing above was a server error.
    text = node.get("/metrics")
    assert 'api_responses_total{status="500"}' not in text
    assert metric(node, "api_responses_total") > before_5xx


def test_bodies_are_counted_as_they_stream(node: NodeProcess) -> None:
    url = node.api_url + "/v1/channels/general/events"
    headers = {**node.headers, "Content-Type": "application/json"}
    declared = httpx.post(url, content=b"x" * (5 * 1024 * 1024), headers=headers)
    assert declared.status_code == 413
    peak_before = _proc_status(node, "VmHWM")

    def chunks() -> Iterator[bytes]:
        yield b'{"content": "'
        for _ in range(150):
            yield b"a" * (1024 * 1024)
        yield b'"}'

    try:
        chunked = httpx.post(url, content=chunks(), headers=headers, timeout=30)
        assert chunked.status_code == 413
    except httpx.TransportError:
        pass  # the node answered 413 and closed while we were still sending
    assert metric(node, "api_errors_total") >= 2
    grown = _proc_status(node, "VmHWM") - peak_before
    assert grown < 64 * 1024 * 1024, f"peak RSS grew {grown / 2**20:.0f} MiB for a refused body"
    assert node.get("/v1/status")["peer_id"] == node.peer_id


def _slow_body(host: str, port: int, token: str) -> None:
    request = (f"POST /v1/channels/general/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
               "Content-Length: 100\r\n\r\n{").encode()
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=20) as slow:
        slow.sendall(request)
        for _ in range(8):  # a byte a second: each read is in time, the body never is
            time.sleep(1)
            try:
                slow.sendall(b" ")
            except OSError:
                break  # the node has answered and closed
        answer = slow.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert time.monotonic() - started < 10


def _idle(host: str, port: int) -> None:
    with socket.create_connection((host, port), timeout=20) as idle:
        started = time.monotonic()
        assert idle.recv(4096) == b""  # closed by the node, not by our timeout
        assert time.monotonic() - started < 10


def _slow_headers(host: str, port: int) -> None:
    """Headers a byte a second never make a request: the idle timer closes the connection."""
    with socket.create_connection((host, port), timeout=20) as slow_headers:
        started = time.monotonic()
        slow_headers.sendall(b"GET /v1/status HTTP/1.1\r\n")
        closed = False
        for _ in range(15):
            time.sleep(1)
            try:
                slow_headers.sendall(b"X")
            except OSError:
                closed = True
                break
        assert closed, "slow headers held the connection"
        assert time.monotonic() - started < 10


def test_slow_body_and_idle_clients_are_dropped(node: NodeProcess) -> None:
    host, port = node.api_url.removeprefix("http://").rsplit(":", 1)
    # Three clients side by side: each one's timer runs on its own connection.
    with ThreadPoolExecutor(3) as pool:
        clients = [pool.submit(_slow_body, host, int(port), node.token),
                   pool.submit(_idle, host, int(port)), pool.submit(_slow_headers, host, int(port))]
        for client in clients:
            client.result()


def test_a_quiet_follow_stream_outlives_the_idle_timeout(node: NodeProcess) -> None:
    with node.client() as client, client.stream("GET", "/v1/channels/general/follow") as stream:
        assert stream.status_code == 200
        time.sleep(4)  # twice api.idle_timeout_s with nothing sent either way
        client.post("/v1/channels/general/events", json={"content": "after a quiet while"})
        assert any("after a quiet while" in line for line in stream.iter_lines())


def test_pages_are_bounded_in_bytes(node: NodeProcess) -> None:
    blob = "b" * (200 * 1024)
    with node.client() as client:
        ids = []
        for i in range(12):
            r = client.post("/v1/channels/big/events", json={"content": f"{i}{blob}"})
            if r.status_code == 404:
                pytest.fail("channel big missing")
            ids.append(r.json()["message_id"])
    # ~2.4 MB of events against a 1 MiB page budget: several pages, each under budget + one.
    seen: list[str] = []
    pages = 0
    params: dict[str, object] = {"limit": 10_000}
    while True:
        r = httpx.get(node.api_url + "/v1/channels/big/events", params=params,
                      headers=node.headers)
        assert len(r.content) <= 1024 * 1024 + 700 * 1024
        body = r.json()
        seen += [e["message_id"] for e in body["events"]]
        pages += 1
        if not body["more"]:
            break
        params.update(body["next"])
    assert pages >= 3
    assert sorted(seen) == sorted(ids)


def test_follow_streams_are_limited(node: NodeProcess) -> None:
    url = node.api_url + "/v1/channels/general/follow"
    with httpx.Client(headers=node.headers, timeout=10) as client:
        with client.stream("GET", url) as first, client.stream("GET", url) as second:
            assert first.status_code == second.status_code == 200
            third = client.get(url)
            assert third.status_code == 429
            assert "max_follows" in _one_line_4xx(third)
        def slot_back() -> bool:  # the closed streams give their slots back
            with client.stream("GET", url) as again:
                return again.status_code == 200

        wait_for(slot_back, 10, "follow slots were not released")
