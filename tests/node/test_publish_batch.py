"""Publishing many events in one request (issue 31): a batch body on the publish route, one
commit for the batch, group commit across concurrent publishers, ``syncnode publish --lines``,
the bounds with clear errors, and no answered event of a batch lost to SIGKILL."""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.harness.cluster import channel_log, metric, wait_for
from tests.harness.procs import NodeApi, NodeProcess, running_node

pytestmark = pytest.mark.timeout(180)

MAX_EVENTS = 300
ENV = {"SYNCNODE_API_PUBLISH_BATCH_MAX_EVENTS": str(MAX_EVENTS)}
PATH = "/v1/channels/general/events"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeApi]:
    yield from running_node(tmp_path_factory.mktemp("batch"), env=ENV, in_process=True)


def _post(node: NodeApi, body: object, **headers: str) -> httpx.Response:
    return httpx.post(node.api_url + PATH, json=body, headers={**node.headers, **headers},
                      timeout=60)


def _contents(node: NodeApi) -> list[str]:
    return [content for _, _, content in channel_log(node, "general")]


def test_a_batch_is_one_commit_answered_in_order(node: NodeApi) -> None:
    batches = metric(node, "store_batches_total")
    items = [{"content": f"batch-{i}"} for i in range(250)]
    items[7] = {"content_b64": "AP8="}  # bytes, not UTF-8
    answer = _post(node, {"events": items})
    assert answer.status_code == 200, answer.text
    events = answer.json()["events"]
    assert len(events) == 250 and len({e["message_id"] for e in events}) == 250
    assert all(e["channel"] == "general" and e["sender"] == node.peer_id for e in events)
    lamports = [e["lamport"] for e in events]
    assert lamports == sorted(lamports) and len(set(lamports)) == 250
    assert metric(node, "store_batches_total") - batches == 1  # one transaction for all
    log = {mid: content for _, mid, content in channel_log(node, "general")}
    assert [log[e["message_id"]] for e in events[:7]] == [f"batch-{i}" for i in range(7)]
    assert log[events[7]["message_id"]] is None  # stored as the bytes, not as text
    assert metric(node, "api_publish_batches_total") >= 1


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"events": []}, 400, "at least one event"),
    ({"events": [{"content": "x"}] * (MAX_EVENTS + 1)}, 413, "api.publish_batch_max_events"),
    ({"events": [{"content": "ok"}, {"content": ""}]}, 400, "events[1]: content must not be"),
    ({"events": [{"content": "ok"}] * 3 + [{"content_b64": "!!"}]}, 400, "events[3]: content_b64"),
    ({"events": [{"content": "ok"}], "also": 1}, 400, "nothing else"),
    ({"events": "ok"}, 400, "a batch body is"),
    ({"events": [{"content": "ok"}, "ok"]}, 400, "events[1]: body must be"),
])
def test_a_bad_batch_is_refused_whole_with_a_clear_error(
        node: NodeApi, body: object, status: int, says: str) -> None:
    before = len(_contents(node))
    errors = metric(node, "api_errors_total")
    answer = _post(node, body)
    assert answer.status_code == status and says in answer.json()["error"], answer.text
    assert len(_contents(node)) == before  # nothing of it was published
    assert metric(node, "api_errors_total") == errors + 1


def test_a_batch_takes_no_idempotency_key(node: NodeApi) -> None:
    answer = _post(node, {"events": [{"content": "keyed"}]}, **{"Idempotency-Key": "k1"})
    assert answer.status_code == 400 and "Idempotency-Key" in answer.json()["error"]
    assert "keyed" not in _contents(node)


def test_concurrent_publishers_share_commits(node: NodeApi) -> None:
    """Group commit: 60 single publishes from 20 threads, each answered after its commit, in
    fewer transactions than publishes."""
    batches = metric(node, "store_batches_total")
    with node.client(timeout=60) as client, ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda i: client.post(PATH, json={"content": f"group-{i}"}),
                                range(60)))
    assert {a.status_code for a in answers} == {200}
    commits = metric(node, "store_batches_total") - batches
    assert 1 <= commits < 60, commits
    stored = set(_contents(node))
    assert {f"group-{i}" for i in range(60)} <= stored


def test_cli_publishes_lines_in_batches(node: NodeApi) -> None:
    lines = b"".join(f"line-{i}\n".encode() for i in range(7)) + b"\xff\xfe raw\r\n"
    result = subprocess.run(node.cli_command("publish", "general", "--lines", "-", "--batch", "3"),
                            input=lines, capture_output=True, timeout=60, env=node.cli_env())
    assert result.returncode == 0, result.stderr
    ids = result.stdout.decode().split()
    assert len(ids) == 8 and len(set(ids)) == 8
    log = {mid: content for _, mid, content in channel_log(node, "general")}
    assert [log[m] for m in ids[:7]] == [f"line-{i}" for i in range(7)]
    assert log[ids[7]] is None  # not UTF-8: sent as bytes


def test_cli_refuses_a_file_with_an_empty_line_before_publishing(
        node: NodeApi, tmp_path: Path) -> None:
    before = len(_contents(node))
    source = tmp_path / "events.txt"
    source.write_text("first\n\nthird\n")
    result = subprocess.run(node.cli_command("publish", "general", "--lines", str(source)),
                            capture_output=True, text=True, timeout=60, env=node.cli_env())
    assert result.returncode == 2 and "line 2 is empty" in result.stderr, result.stderr
    assert len(_contents(node)) == before


def test_sigkill_loses_no_answered_event_of_a_batch(tmp_path: Path) -> None:
    """Batches answered before a SIGKILL are all in the log after the restart (each answer
    comes after its batch's commit)."""
    victim = NodeProcess(tmp_path / "n").start()
    answered: list[str] = []
    stop = threading.Event()

    def publisher(tag: str) -> None:
        with victim.client(timeout=10) as client:
            k = 0
            while not stop.is_set():
                items = [{"content": f"{tag}-{k}-{i}"} for i in range(50)]
                try:
                    r = client.post(PATH, json={"events": items})
                except httpx.HTTPError:
                    return  # the node went away with this batch unanswered
                if r.status_code == 200:
                    answered.extend(e["message_id"] for e in r.json()["events"])
                k += 1

    threads = [threading.Thread(target=publisher, args=(f"p{i}",)) for i in range(3)]
    try:
        for t in threads:
            t.start()
        with contextlib.suppress(AssertionError):  # killed after 60 s at the latest
            wait_for(lambda: len(answered) >= 600, 60, "fewer than 600 answers")
        victim.kill()  # SIGKILL with batches in flight
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        victim.kill()
    assert len(answered) >= 600, "publishers got too few answers before the kill"
    restarted = NodeProcess(tmp_path / "n").start()
    try:
        stored = {mid for _, mid, _ in channel_log(restarted, "general")}
        missing = set(answered) - stored
        assert not missing, f"{len(missing)} answered events lost"
    finally:
        restarted.kill()
