"""Verifying fetched events in worker threads, when there are no ingest worker processes."""

from __future__ import annotations

from collections.abc import Callable

import trio

from sync.errors import RemoteProtocolError
from sync.sds import SignedEvent, decode_event

__all__ = ["MAX_EVENT_BYTES", "VERIFY_THREADS", "Decoder", "verify_in_threads"]

MAX_EVENT_BYTES = 1 << 20
VERIFY_THREADS = 2

Decoder = Callable[[bytes], SignedEvent]


def _default_decode(wire: bytes) -> SignedEvent:
    return decode_event(wire, max_size=MAX_EVENT_BYTES)


def _decode_all(wires: list[bytes], decode: Decoder = _default_decode
                ) -> list[SignedEvent | None]:
    out: list[SignedEvent | None] = []
    for wire in wires:
        try:
            out.append(decode(wire))
        except RemoteProtocolError:
            out.append(None)
    return out


async def verify_in_threads(wires: list[bytes], threads: int = VERIFY_THREADS,
                            decode: Decoder = _default_decode) -> list[SignedEvent | None]:
    """Decode and verify events (id and signature, or what the channel's SDS profile asks
    for) in worker threads: libsodium releases the GIL, so a batch is verified on every core
    while the event loop keeps serving."""
    if len(wires) < 64:
        return _decode_all(wires, decode)
    step = -(-len(wires) // threads)
    parts: list[list[SignedEvent | None]] = [[] for _ in range(threads)]

    async def run(i: int) -> None:
        parts[i] = await trio.to_thread.run_sync(_decode_all, wires[i * step : (i + 1) * step],
                                                 decode)

    async with trio.open_nursery() as nursery:
        for i in range(threads):
            nursery.start_soon(run, i)
    return [event for part in parts for event in part]
