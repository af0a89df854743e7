"""``node.p2p.compat.yamux`` against real py-libp2p hosts on 127.0.0.1 (issue 31): py-libp2p
0.8.1 answered every read of a Yamux stream with a WINDOW_UPDATE frame (one more Noise message
and socket send per read); with the patch a stream reading small messages sends an update only
once half the window was consumed (go-yamux's rule), and transfers many times the window still
complete (the sender is never left without credit). The only wrapper counts calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, YamuxStream

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig
from node.p2p.run import open_host

ECHO = "/test/yamux-echo/1.0.0"


@pytest.fixture
def updates(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """WINDOW_UPDATE frames sent, by any stream."""
    sent = [0]
    original = YamuxStream.send_window_update

    async def counted(self: YamuxStream, *args: Any, **kwargs: Any) -> None:
        sent[0] += 1
        await original(self, *args, **kwargs)

    monkeypatch.setattr(YamuxStream, "send_window_update", counted)
    yield sent


async def _echo(stream: FramedStream) -> None:
    async for frame in stream:
        await stream.send(frame)


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_small_messages_cost_no_window_update_each_and_bulk_still_flows(
        updates: list[int]) -> None:
    keys = [Ed25519PrivateKey.from_private_bytes(bytes([60 + i]) * 32) for i in range(2)]
    async with open_host(keys[0], P2PConfig(), clock=SystemClock()) as server, \
            open_host(keys[1], P2PConfig(), clock=SystemClock()) as client:
        server.set_stream_handler(ECHO, _echo)
        await client.connect(server.listen_addrs[0])
        async with await client.open_stream(server.peer_id, ECHO) as stream:
            with trio.fail_after(30):
                start = updates[0]
                for i in range(300):  # 300 x 1 KB each way: 300 KB, read by ~600 read calls
                    await stream.send(bytes([i % 256]) * 1000)
                    assert await stream.receive() == bytes([i % 256]) * 1000
                small = updates[0] - start
                print("window updates for 300 small echoes:", small)
                # 0.8.1 sent one per read on each side (> 600); at half a window (128 KiB)
                # per update, 300 KB each way needs 2 per side.
                assert small <= 8, small
                big = bytes(range(256)) * 256  # 64 KiB frames, 4 MiB each way: 16 windows
                for _ in range(64):
                    await stream.send(big)
                    assert await stream.receive() == big
                assert updates[0] - start > small  # credit still comes back
                assert 64 * len(big) >= 16 * DEFAULT_WINDOW_SIZE
