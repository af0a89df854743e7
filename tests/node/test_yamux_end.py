"""A Yamux stream's received bytes outlive its connection (compat entry Y3), between real
hosts on 127.0.0.1: py-libp2p 0.8.1 cleared them when the connection ended (the peer's
GO_AWAY or clean close) and reset the stream, so a peer that wrote its last frame, closed its
stream and then its connection lost that frame whenever our application read the stream only
after the end. Now the frame is read, then EOF; a stream the peer had not closed is reset at
the end, as in 0.8.1 and go-yamux; the kept bytes go with the stream."""

from __future__ import annotations

import gc
import threading
from contextlib import AbstractAsyncContextManager

import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.p2p import FramedStream, P2PConfig, P2PHost
from node.p2p.frames import StreamClosedError
from node.p2p.run import open_host
from tests.harness.cluster import until

LAST = "/test/last-frame/1.0.0"


def _host() -> AbstractAsyncContextManager[P2PHost]:
    return open_host(Ed25519PrivateKey.generate(), P2PConfig(), clock=SystemClock())


async def _ended(reader: P2PHost, writer_id: str) -> None:
    await until(lambda: writer_id not in reader.connected_peers(), 20,
                "the connection did not end")


async def _write_and_leave(writer: P2PHost, reader: P2PHost, frames: list[bytes], *,
                           close_stream: bool = True) -> None:
    """Write ``frames``, close the stream (or not), then close the connection."""
    await writer.connect(reader.listen_addrs[0])
    stream = await writer.open_stream(reader.peer_id, LAST)
    for frame in frames:
        await stream.send(frame)
    if close_stream:
        await stream.close()
    await writer.disconnect(reader.peer_id)


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_frames_written_before_the_peer_left_are_read_after_it_left() -> None:
    """The writer writes, closes its stream, closes the connection; the reader starts reading
    only once the connection is gone: every frame, then EOF (0.8.1: a reset, no frame)."""
    await _read_the_last_frames(after_the_end=True)


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_a_reader_waiting_when_the_peer_leaves_gets_the_last_frames() -> None:
    """The reader waits on the stream when the writer's last frames, its FIN and the end of
    the connection arrive together: the writer runs in its own thread (its own trio loop)
    while the reader's loop is held, so one socket read brings all of it and Yamux handles
    the connection's end before the waiting read runs again (with the buffered Noise reader,
    N1: without it each socket read is a checkpoint). It still gets the frames, then EOF
    (without Y3: the read woke to a cleared connection, a reset: the hostile Recon peer's
    lost last frame)."""
    frames = [b"last" * 500, b"words" * 300]
    outcome: list[object] = []
    reading, done = trio.Event(), trio.Event()
    opened, go, finished = threading.Event(), threading.Event(), threading.Event()
    async with _host() as reader:
        async def read_at_once(stream: FramedStream) -> None:
            try:
                reading.set()
                outcome.extend([frame async for frame in stream])
                outcome.append("eof")
            except Exception as exc:  # recorded for the assertion
                outcome.append(repr(exc))
            finally:
                done.set()

        reader.set_stream_handler(LAST, read_at_once)

        async def write_and_leave() -> None:
            async with _host() as writer:
                await writer.connect(reader.listen_addrs[0])
                stream = await writer.open_stream(reader.peer_id, LAST)
                opened.set()
                await trio.to_thread.run_sync(go.wait)
                for frame in frames:
                    await stream.send(frame)
                await stream.close()
                await writer.disconnect(reader.peer_id)
            finished.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, trio.run, write_and_leave)
            await trio.to_thread.run_sync(opened.wait)
            with trio.fail_after(20):
                await reading.wait()
            await trio.testing.wait_all_tasks_blocked()
            go.set()
            # Hold this loop (no checkpoint) until the writer is gone: its frames, its FIN
            # and its GO_AWAY all wait in our socket for one read.
            assert finished.wait(20)
            with trio.fail_after(20):
                await done.wait()
    assert outcome == [*frames, "eof"], outcome[-1:]


async def _read_the_last_frames(*, after_the_end: bool) -> None:
    frames = [bytes([i]) * (1_000 + 333 * i) for i in range(5)]
    outcome: list[object] = []
    done = trio.Event()
    async with _host() as reader, _host() as writer:
        async def read_after_the_end(stream: FramedStream) -> None:
            try:
                if after_the_end:
                    await _ended(reader, writer.peer_id)
                for _ in frames:
                    outcome.append(await stream.receive())
                try:
                    await stream.receive()
                except StreamClosedError as exc:
                    outcome.append(str(exc))
            except Exception as exc:  # recorded for the assertion
                outcome.append(repr(exc))
            finally:
                done.set()

        reader.set_stream_handler(LAST, read_after_the_end)
        await _write_and_leave(writer, reader, frames)
        with trio.fail_after(30):
            await done.wait()
    assert outcome[:-1] == frames, outcome[:1]
    assert outcome[-1] == f"stream closed by {writer.peer_id}"  # EOF, not "reset by"


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_a_stream_its_peer_never_closed_is_reset_when_the_connection_ends() -> None:
    """Without the writer's FIN the stream was cut, not finished: reset (go-yamux's rule),
    so a reader never takes a cut stream for a complete one."""
    outcome: list[str] = []
    done = trio.Event()
    async with _host() as reader, _host() as writer:
        async def read_after_the_end(stream: FramedStream) -> None:
            try:
                await _ended(reader, writer.peer_id)
                await stream.receive()
                outcome.append("a frame")
            except StreamClosedError as exc:
                outcome.append(str(exc))
            finally:
                done.set()

        reader.set_stream_handler(LAST, read_after_the_end)
        await _write_and_leave(writer, reader, [b"cut"], close_stream=False)
        with trio.fail_after(30):
            await done.wait()
    assert outcome == [f"stream reset by {writer.peer_id}"]


@pytest.mark.trio
@pytest.mark.timeout(60)
async def test_kept_bytes_go_when_read_or_when_the_stream_is_dropped() -> None:
    """Bytes kept past the end are held by their stream only: read to EOF they are gone, and
    a stream its handler leaves unread holds nothing once the handler is done with it."""
    from node.p2p.compat.yamux_end import kept_streams

    gc.collect()
    before = kept_streams()
    handled = [trio.Event(), trio.Event()]
    async with _host() as reader, _host() as writer, _host() as other:
        async def never_read(stream: FramedStream) -> None:
            await _ended(reader, writer.peer_id)
            assert kept_streams() == before + 1
            handled[0].set()

        async def read_all(stream: FramedStream) -> None:
            await _ended(reader, other.peer_id)
            assert [frame async for frame in stream] == [b"x" * 5_000]
            handled[1].set()

        reader.set_stream_handler(LAST, never_read)
        await _write_and_leave(writer, reader, [b"x" * 5_000])
        with trio.fail_after(30):
            await handled[0].wait()
        reader.set_stream_handler(LAST, read_all)
        await _write_and_leave(other, reader, [b"x" * 5_000])
        with trio.fail_after(30):
            await handled[1].wait()
        await until(lambda: gc.collect() is not None and kept_streams() == before, 20,
                    "kept bytes outlived their streams")
