"""The daemon on an injected clock: ``serve`` takes the node's one clock and every service reads
it, so a whole node (real libp2p host, real SQLite, real HTTP API) runs on trio's
``MockClock`` and a test moves a day forward in an instant instead of waiting for it.

Here the rule is the API's ``Idempotency-Key`` lifetime at its default (``api.idempotency_ttl_s``,
one day): a key repeats the first answer until it expires, then it is free for a new publish.
The mock clock runs at real speed (``rate=1``) and jumps only where the test says: no timer
fires early behind a worker thread's back, as an autojumping clock would let it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from trio.testing import MockClock

from node.clock import TrioWallClock
from node.config.settings import Config, load_config
from node.daemon import serve
from node.datadir.api_token import read_token
from node.runtime import NodeInfo

pytestmark = pytest.mark.timeout(120)

T0 = 1_700_000_000.0  # the wall clock's reading when the mock clock is at 0


async def _publish(info: NodeInfo, config: Config, content: str, key: str) -> httpx.Response:
    # A new connection each time: across a jump the server's keep-alive timer ran out.
    headers = {"Authorization": f"Bearer {read_token(config.data_path)}", "Idempotency-Key": key}
    async with httpx.AsyncClient(base_url=info.api_url, headers=headers, timeout=30) as client:
        return await client.post("/v1/channels/general/events", json={"content": content})


async def _uptime(info: NodeInfo, config: Config) -> float:
    headers = {"Authorization": f"Bearer {read_token(config.data_path)}"}
    async with httpx.AsyncClient(base_url=info.api_url, headers=headers, timeout=30) as client:
        return float((await client.get("/v1/status")).json()["uptime_s"])


def test_a_day_on_the_mock_clock_expires_an_idempotency_key(tmp_path: Path) -> None:
    config = load_config(overrides={
        "node.data_dir": str(tmp_path / "n"), "api.listen": "127.0.0.1:0",
        "p2p.listen": ["/ip4/127.0.0.1/tcp/0"]})
    ttl = config.api.idempotency_ttl_s
    assert ttl == 86400.0  # the default the rule is proved on
    mock = MockClock(rate=1.0)

    async def main() -> None:
        shutdown = trio.Event()
        async with trio.open_nursery() as nursery:
            info: NodeInfo = await nursery.start(serve, config, shutdown, TrioWallClock(T0))
            first = await _publish(info, config, "once", "key-1")
            assert first.status_code == 200, first.text
            assert await _uptime(info, config) < ttl / 2

            mock.jump(ttl - 60)  # a minute before the key expires
            again = await _publish(info, config, "once", "key-1")
            assert again.status_code == 200 and again.json() == first.json()
            assert again.headers.get("idempotent-replayed") == "true"
            assert await _uptime(info, config) >= ttl - 60  # the status reads the same clock

            mock.jump(120)  # a minute after
            later = await _publish(info, config, "another", "key-1")
            assert later.status_code == 200, later.text  # not a 422: the key is free again
            assert "idempotent-replayed" not in later.headers
            assert later.json()["message_id"] != first.json()["message_id"]
            shutdown.set()

    trio.run(main, clock=mock)


def test_the_test_clock_is_read_from_a_worker_thread() -> None:
    """The applications stamp their rows with ``wall()`` in a worker thread: the mock clock's
    wall time is readable there too (trio's clock is asked from the thread)."""
    mock = MockClock()
    clock = TrioWallClock(T0)

    async def main() -> tuple[float, float]:
        mock.jump(10)
        return (await trio.to_thread.run_sync(clock.wall),
                await trio.to_thread.run_sync(clock.now))

    assert trio.run(main, clock=mock) == (T0 + 10, 10)
