"""A Yamux stream's receive window is enforced (compat entry Y4), between real hosts on
127.0.0.1: py-libp2p 0.8.1 appended a DATA frame beyond the window to the stream's buffer with
a warning, so a peer ignoring flow control made us hold any amount on a stream we did not read
(the defect's reproduction: 8 MiB written past a 256 KiB window, all held). Now the frame is
refused unread, the connection ended, counted, and the peer charged; a sender that uses the
window to its last byte, and a bulk transfer of many windows, pass.

The hostile side is an ordinary host whose stream ignores its send window (``send_window``
set huge: libp2p's own ``write`` then sends as if the peer had granted it), or that writes
raw frames on its connection (the SYN and ACK paths)."""

from __future__ import annotations

import contextlib
import inspect
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import libp2p.stream_muxer.yamux.yamux as yamux_module
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.peer.id import ID

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig, P2PHost, compat
from node.p2p.compat import yamux_window
from node.p2p.run import open_host
from node.p2p.scoring import PeerScoring
from node.telemetry.metrics import Metrics
from sync.peerscore import ScoreConfig
from tests.harness.cluster import until

STALL = "/test/window-stall/1.0.0"
BULK = "/test/window-bulk/1.0.0"
WINDOW = yamux_module.DEFAULT_WINDOW_SIZE
CHUNK = yamux_module.MAX_MESSAGE_SIZE - yamux_module.HEADER_SIZE  # libp2p's own frame body


@asynccontextmanager
async def _pair() -> AsyncIterator[tuple[P2PHost, P2PHost, Metrics]]:
    """A server and a client host, connected; the metrics of the server's peer scores (what it
    charged, by reason). libp2p logs its errors (the client's "Received GO_AWAY ...: Protocol
    error")."""
    config = P2PConfig(libp2p_log_level="ERROR")
    charged = Metrics()
    scoring = PeerScoring(charged, ScoreConfig(), SystemClock())
    async with open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock(),
                         scoring=scoring) as srv, \
            open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as cli:
        await cli.connect(srv.listen_addrs[0])
        yield srv, cli, charged


def _muxed(host: P2PHost, peer: str) -> Any:
    """``host``'s Yamux connection to ``peer``."""
    (conn,) = host.libp2p_host.get_network().get_connections(ID.from_base58(peer))
    return conn.muxed_conn


def _frame(kind: int, flags: int, stream_id: int, body: bytes) -> bytes:
    return struct.pack(yamux_module.YAMUX_HEADER_FORMAT, 0, kind, flags, stream_id,
                       len(body)) + body


async def _cut_off(srv: P2PHost, cli: P2PHost, charged: Metrics) -> None:
    await until(lambda: cli.peer_id not in srv.connected_peers(), 20,
                "the connection was not ended")
    await until(lambda: srv.stats.yamux_window_overruns == 1, 20, "the overrun not counted")
    # One charge, of the client, for breaking the protocol.
    assert charged.value("peer_penalties_total", reason="protocol") == 1
    assert charged.total("peer_penalties_total") == 1
    assert srv.scoring is not None and srv.scoring.score(cli.peer_id) < 0


def test_y4_every_data_frame_body_is_read_through_the_checked_method() -> None:
    """The contract: in 0.8.1's reader loop each DATA body (SYN, ACK, open stream) is read by
    ``_read_data_body`` right after the header (the loop's only other read), the overrun's
    ``TooSlowError`` reaches the clean-up from each path, and ``recv_window`` grows only where
    the grant is sent (so it is the credit the peer holds)."""
    compat.apply()
    loop = inspect.getsource(yamux_module.Yamux.handle_incoming)
    assert loop.count("await read_exactly(") == 1
    assert "header = await read_exactly(self.secured_conn, HEADER_SIZE)" in loop
    assert loop.count("await self._read_data_body(length)") == 3
    assert loop.count("except trio.TooSlowError:") == 2  # the open-stream path re-raises it
    assert "except trio.TooSlowError:\n                        raise" in loop
    tail = loop[loop.rindex("except trio.TooSlowError:"):]
    assert tail.index("await self._cleanup_on_error()") < tail.index("except Exception")
    assert loop.count(".recv_window -= len(") == 3  # what arrived, on each DATA path
    assert "GO_AWAY_PROTOCOL_ERROR" in loop  # the peer knows the code it is sent
    body = inspect.getsource(yamux_window._original_read_data_body)  # type: ignore[arg-type]
    assert "read_exactly(self.secured_conn, length)" in body
    module = inspect.getsource(yamux_module)
    grants = [line.strip() for line in module.splitlines() if "recv_window +=" in line]
    # _grow_to_delta, _apply_autotune_epoch (Y1 sends what they return) and the replaced
    # _auto_tune_and_send_window_update's three branches.
    assert len(grants) == 5, grants
    assert module.count(".send_window_update(") == 1  # the one grant, in the replaced method
    assert yamux_module.YamuxStream._auto_tune_and_send_window_update.__module__ == (
        "node.p2p.compat.yamux")
    assert issubclass(compat.WindowOverrun, trio.TooSlowError)


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_a_peer_writing_past_the_window_is_cut_off_and_nothing_beyond_is_buffered(
        caplog: pytest.LogCaptureFixture) -> None:
    """The peer uses the window to its last byte (accepted: an honest sender may), then
    writes one more byte past it: refused unread, the connection ended with a GO_AWAY
    (protocol error, which the peer's libp2p logs), counted, charged."""
    held: list[Any] = []
    gate = trio.Event()

    async def stall(stream: FramedStream) -> None:  # accepts the stream, never reads it
        held.append(stream._stream.muxed_stream)
        await gate.wait()

    async with _pair() as (srv, cli, charged):
        srv.set_stream_handler(STALL, stall)
        stream = await cli.open_stream(srv.peer_id, STALL)
        muxed = stream._stream.muxed_stream
        await until(lambda: held, 20, "the handler did not start")
        theirs = held[0]
        buffer = theirs.conn.stream_buffers[theirs.stream_id]
        edge = muxed.send_window  # the window less the protocol negotiation's bytes
        assert edge == theirs.recv_window > WINDOW - 100
        await muxed.write(b"w" * edge)  # libp2p's write, within its credit
        await until(lambda: len(buffer) == edge, 20, "the window's bytes did not arrive")
        assert theirs.recv_window == 0
        await trio.sleep(0.2)
        assert cli.peer_id in srv.connected_peers() and srv.stats.yamux_window_overruns == 0
        muxed.send_window = 1 << 40  # ignore flow control from here on
        with pytest.raises(Exception):  # noqa: B017 - the write or a later one fails
            for _ in range(64):
                await muxed.write(b"x" * CHUNK)
        await _cut_off(srv, cli, charged)
        assert len(buffer) == edge and b"x" not in buffer  # the frame was never read
        assert compat.window_overrun(theirs.conn)
        await until(lambda: "GO_AWAY" in caplog.text and "Protocol error" in caplog.text, 20,
                    "the peer got no GO_AWAY with the protocol error")
        gate.set()


@pytest.mark.trio
@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["syn", "ack"])
async def test_an_opening_or_acknowledging_frame_past_the_window_is_refused(path: str) -> None:
    """The other two DATA paths of 0.8.1's reader: a SYN frame opening a stream with more than
    the initial window, and an ACK-flagged frame on an open stream, each past the window."""
    async with _pair() as (srv, cli, charged):
        conn = _muxed(cli, srv.peer_id)
        if path == "syn":
            frame = _frame(yamux_module.TYPE_DATA, yamux_module.FLAG_SYN, 1001, b"s" * (WINDOW + 1))
        else:
            srv.set_stream_handler(STALL, lambda _stream: trio.sleep_forever())
            stream = await cli.open_stream(srv.peer_id, STALL)
            sid = stream._stream.muxed_stream.stream_id
            frame = _frame(yamux_module.TYPE_DATA, yamux_module.FLAG_ACK, sid, b"a" * WINDOW)
        with contextlib.suppress(Exception):  # the node may close before it was all sent
            await conn._write_frame(frame)
        await _cut_off(srv, cli, charged)


@pytest.mark.trio
@pytest.mark.timeout(120)
async def test_an_honest_bulk_transfer_of_many_windows_passes() -> None:
    """12 MiB on one stream, read slowly in small pieces (the window is used up again and again
    and auto-tuned): libp2p's own sender never overruns what we grant."""
    total = 12 << 20
    received = [0]
    targets: list[int] = []

    async def slow_reader(stream: FramedStream) -> None:
        muxed = stream._stream.muxed_stream
        reads = 0
        while received[0] < total:
            received[0] += len(await muxed.read(7_000))
            reads += 1
            if reads % 16 == 0:  # the sender fills the window while we pause
                await trio.sleep(0.001)
        targets.append(muxed.target_recv_window)

    async with _pair() as (srv, cli, charged):
        srv.set_stream_handler(BULK, slow_reader)
        stream = await cli.open_stream(srv.peer_id, BULK)
        block = bytes(range(256)) * 4096  # 1 MiB
        with trio.fail_after(90):
            for _ in range(total // len(block)):
                await stream._stream.muxed_stream.write(block)
            await until(lambda: received[0] == total, 60, "the transfer did not complete")
        assert cli.peer_id in srv.connected_peers()
        assert srv.stats.yamux_window_overruns == 0 and charged.total("peer_penalties_total") == 0
        await until(lambda: targets, 20, "the reader did not finish")
        print("receive window at the end:", targets[0])


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_a_frame_for_a_stream_no_longer_open_is_dropped_not_refused() -> None:
    """Frames still in flight to a stream we reset (its window may have grown past 256 KiB)
    are read and dropped, as in 0.8.1: nothing is held, and the sender may be honest."""
    async with _pair() as (srv, cli, charged):
        conn = _muxed(cli, srv.peer_id)
        await conn._write_frame(_frame(yamux_module.TYPE_DATA, 0, 1001, b"g" * (WINDOW + 1)))
        ping = await cli.ping(srv.peer_id)  # the connection still serves
        assert ping >= 0 and cli.peer_id in srv.connected_peers()
        assert srv.stats.yamux_window_overruns == 0 and charged.total("peer_penalties_total") == 0
