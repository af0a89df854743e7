"""Serving the WANT/EVENTS phase of a Recon session: each want list is answered in
byte-bounded batches read from the database and sent as they are packed, so one stream holds
at most about ``serve_batch_bytes`` of events however many keys the peer asks for and however
slowly it reads (the rules: ``sync.transfer.WantServer``, ``EventsPacker``, ``byte_batches``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from node.p2p import FramedStream
from node.store.events import EventStore
from storage import events_by_keys, wire_sizes_by_keys
from sync.transfer import EventsPacker, WantServer, byte_batches
from sync.workbudget import want_units

__all__ = ["MAX_KEY_BYTES", "serve_wants"]

MAX_KEY_BYTES = 256


async def serve_wants(stream: FramedStream, store: EventStore, budget: int, fetch_batch: int,
                      max_frame_bytes: int, serve_batch_bytes: int,
                      on_sent: Callable[[int], None] = lambda _n: None,
                      charge: Callable[[int], Awaitable[None]] | None = None) -> int:
    """Answer the peer's want lists until its last one, at most ``budget`` keys in all;
    returns how many events were sent (``on_sent`` hears of each answer's count). Each want
    list is ``charge``d to the peer (``sync.workbudget.want_units``) before it is read."""
    core = WantServer(budget=budget, max_items=max(fetch_batch, 1024),
                      max_key_bytes=MAX_KEY_BYTES, peer=stream.peer_id)
    total = 0
    while not core.done:
        want = core.receive(await stream.receive())
        if charge is not None:
            await charge(want_units(len(want.keys)))
        packer = EventsPacker(max_frame_bytes, fetch_batch)
        sent = 0
        if want.keys:
            sizes = await store.read(wire_sizes_by_keys, want.keys)
            for batch in byte_batches(sizes, serve_batch_bytes, fetch_batch):
                found = await store.read(events_by_keys, batch)
                for event in found:
                    frame = packer.add(event.wire)
                    if frame is not None:
                        await stream.send(frame)
                sent += len(found)
                del found
        await stream.send(packer.finish())
        total += sent
        on_sent(sent)
    return total
