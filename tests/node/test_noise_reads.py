"""Noise messages cut from buffered socket reads (compat entry N1): py-libp2p 0.8.1 reads each
Noise message with two exact socket reads (its 2-byte length, then its body); the buffered
reader reads up to 64 KiB at a time and cuts messages from it. Here on a real socket pair, the
bytes split where a reader could trip (inside a length, inside a body, many messages per read,
the largest and an empty message), and the connection's end told apart between messages and
inside one. Between two hosts (fewer socket reads than messages):
``test_libp2p_compat.py::test_n1_noise_messages_are_cut_from_buffered_socket_reads``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from libp2p.io.exceptions import IncompleteReadError
from libp2p.io.trio import TrioTCPStream

from node.p2p.compat.noise import READ_CHUNK, RxBuffer, next_message


def _packet(body: bytes) -> bytes:
    return len(body).to_bytes(2, "big") + body


@asynccontextmanager
async def _socket_pair() -> AsyncIterator[tuple[trio.SocketStream, TrioTCPStream]]:
    """A connected pair of real sockets: the writer's end, and the reader's as libp2p has it."""
    a, b = trio.socket.socketpair()
    writer, reader = trio.SocketStream(a), trio.SocketStream(b)
    async with writer, reader:
        yield writer, TrioTCPStream(reader)


async def _send_in_pieces(writer: trio.SocketStream, pieces: list[bytes]) -> None:
    """Each piece arrives alone: the next is sent once the reader is waiting for more."""
    for piece in pieces:
        await writer.send_all(piece)
        await trio.testing.wait_all_tasks_blocked()


@pytest.mark.trio
@pytest.mark.timeout(30)
async def test_messages_split_anywhere_across_socket_reads_come_whole() -> None:
    bodies = [b"a" * 10, b"", b"b" * 65_535, b"c" * 1_700, b"d" * 3, b"e" * 40_000]
    stream = b"".join(_packet(body) for body in bodies)
    cuts = [1, 2, 3, 13, 14, 16, 20, 100, 40_000, 65_552, 65_553, 65_555, 67_000]
    pieces = [stream[i:j] for i, j in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    got: list[bytes] = []
    reads = [0]
    async with _socket_pair() as (writer, reader):
        async def read(n: int) -> bytes:
            reads[0] += 1
            assert n >= READ_CHUNK
            return await reader.read(n)

        async def consume() -> None:
            rx = RxBuffer()
            for _ in bodies:
                got.append(await next_message(rx, read))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.testing.wait_all_tasks_blocked()
            await _send_in_pieces(writer, pieces)
    assert got == bodies
    # Many messages in one write: one read for all of them.
    many = [bytes([i]) * (100 + i) for i in range(200)]
    got.clear()
    reads[0] = 0
    async with _socket_pair() as (writer, reader):
        await writer.send_all(b"".join(_packet(body) for body in many))
        rx = RxBuffer()
        for _ in many:
            got.append(await next_message(rx, read))
    assert got == many
    assert reads[0] <= 2, reads[0]


@pytest.mark.trio
@pytest.mark.timeout(30)
@pytest.mark.parametrize(("tail", "clean", "received"), [
    (b"", True, 0),  # the connection ends between messages: a clean close
    (b"\x00", False, 1),  # inside a length prefix
    (b"\x00\x10abc", False, 5),  # inside a body
])
async def test_the_end_of_the_connection_is_told_apart(tail: bytes, clean: bool,
                                                       received: int) -> None:
    async with _socket_pair() as (writer, reader):
        await writer.send_all(_packet(b"whole") + tail)
        await writer.aclose()
        rx = RxBuffer()
        assert await next_message(rx, reader.read) == b"whole"
        with pytest.raises(IncompleteReadError) as caught:
            await next_message(rx, reader.read)
    assert caught.value.is_clean_close is clean
    assert caught.value.received_bytes == received
