"""No task can end the daemon (issue 37, finding 3): an unexpected error in a long-lived task is
logged with the traceback of its leaf exception (however deep the task groups nest), counted in
``node_task_failures_total{task=...}``, and the task restarted with back-off."""

from __future__ import annotations

import importlib
import itertools
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from libp2p.peer.peerstore import PeerStoreError

import node.p2p.dialer as dialer_module
from node.clock import SystemClock
from node.config.settings import load_config
from node.daemon import serve
from node.datadir.api_token import read_token
from node.leaves import format_leaves, summarise_leaves
from node.runtime import NodeInfo
from node.supervisor import FIRST_BACKOFF_S, TASK_FAILURES, supervise
from node.telemetry.metrics import Metrics
from tests.harness.cluster import until

UNREACHABLE = "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWGRYZDHBembyGJQqQ6WgLqJWtyVtZNCpnWqZNmRuZw9HW"


def _deep_failure() -> None:
    raise RuntimeError("the leaf that matters")


def _nested(depth: int) -> BaseException:
    try:
        _deep_failure()
    except RuntimeError as exc:
        error: BaseException = exc
    for level in range(depth):
        error = ExceptionGroup(f"level {level}", [error])  # type: ignore[list-item]
    return error


def test_leaves_of_groups_nested_past_the_default_hook_are_named_and_formatted() -> None:
    group = _nested(15)  # the default hook prints ten levels, then "... (max_group_depth ...)"
    assert summarise_leaves(group) == "RuntimeError: the leaf that matters"
    text = format_leaves(group)
    assert "_deep_failure" in text and "the leaf that matters" in text


def _record_fields(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.fields for r in caplog.records  # type: ignore[attr-defined]
            if r.name == "syncnode.supervisor"]


@pytest.mark.trio
async def test_a_failing_task_is_logged_counted_and_restarted_with_backoff(
        caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock) -> None:
    metrics, clock, starts = Metrics(), SystemClock(), []

    async def task() -> None:
        starts.append(trio.current_time())
        if len(starts) <= 3:
            raise _nested(12)

    with caplog.at_level(logging.ERROR, "syncnode.supervisor"):
        await supervise("demo", task, metrics, clock)
    assert len(starts) == 4  # three failures, three restarts, then it returned
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps == [FIRST_BACKOFF_S, 2 * FIRST_BACKOFF_S, 4 * FIRST_BACKOFF_S]
    assert metrics.value(TASK_FAILURES, task="demo") == 3
    assert metrics.total(TASK_FAILURES) == 3  # no other label set
    fields = _record_fields(caplog)
    assert len(fields) == 3 and fields[0]["task"] == "demo"
    assert fields[0]["error"] == "RuntimeError: the leaf that matters"
    assert "_deep_failure" in fields[0]["traceback"]


@pytest.mark.trio
async def test_cancellation_is_not_a_failure(autojump_clock: trio.testing.MockClock) -> None:
    metrics = Metrics()
    with trio.move_on_after(5):
        await supervise("sleeper", trio.sleep_forever, metrics, SystemClock())
    assert metrics.total(TASK_FAILURES) == 0


@pytest.mark.timeout(120)
def test_a_node_whose_dial_loop_raises_keeps_serving(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The crash of issue 37 (``PeerStoreError`` out of the redial) through the real node: the
    peer manager's dial loop fails twice, is logged, counted and restarted; the API answers."""
    real_dial = dialer_module.dial_fresh
    dials: list[str] = []

    async def expired_twice(host: Any, info: Any, address: str, timeout: float) -> None:
        dials.append(address)
        if len(dials) <= 2:
            raise PeerStoreError("peer ID is expired")
        await real_dial(host, info, address, timeout)

    monkeypatch.setattr(dialer_module, "dial_fresh", expired_twice)
    config = load_config(overrides={
        "node.data_dir": str(tmp_path / "n"), "api.listen": "127.0.0.1:0",
        "p2p.listen": ["/ip4/127.0.0.1/tcp/0"], "p2p.bootstrap": [UNREACHABLE]})

    async def main() -> None:
        shutdown = trio.Event()
        async with trio.open_nursery() as nursery:
            info: NodeInfo = await nursery.start(serve, config, shutdown, SystemClock())
            headers = {"Authorization": f"Bearer {read_token(config.data_path)}"}
            async with httpx.AsyncClient(base_url=info.api_url, headers=headers) as client:

                async def failures() -> str:
                    text = (await client.get("/metrics")).text
                    return "".join(line for line in text.splitlines()
                                   if line.startswith(f"syncnode_{TASK_FAILURES}{{"))

                async def dialled_thrice() -> bool:
                    assert (await client.get("/v1/status")).status_code == 200
                    return len(dials) >= 3  # failed, restarted, failed, restarted, dialled

                await until(dialled_thrice, 60, "PeerManager was not restarted twice")
                want = 'syncnode_node_task_failures_total{task="PeerManager"} 2.0'
                assert await failures() == want
            shutdown.set()

    with caplog.at_level(logging.ERROR, "syncnode.supervisor"):
        trio.run(main)
    fields = _record_fields(caplog)
    assert [f["task"] for f in fields] == ["PeerManager", "PeerManager"]
    assert fields[0]["error"] == "PeerStoreError: 'peer ID is expired'"
    assert "expired_twice" in fields[0]["traceback"]


def test_the_cli_names_the_leaf_of_an_unexpected_group(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The daemon's exit line named only the outer group ("unexpected ExceptionGroup:
    Exceptions from Trio nursery (1 sub-exception)"); it names the leaf now, and
    SYNCNODE_DEBUG=1 prints the leaf's traceback, which the default hook cut at ten levels."""
    cli_main = importlib.import_module("node.cli.main")  # (node.cli exports the function)

    def crash(_args: object) -> int:
        raise _nested(12)

    monkeypatch.setattr(cli_main, "_cmd_run", crash)
    monkeypatch.delenv("SYNCNODE_DEBUG", raising=False)
    assert cli_main.main(["run"]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: unexpected RuntimeError: the leaf that matters (a bug"), line
    monkeypatch.setenv("SYNCNODE_DEBUG", "1")
    with pytest.raises(ExceptionGroup):
        cli_main.main(["run"])
    assert "in _deep_failure" in capsys.readouterr().err
