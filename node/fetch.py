"""Fetch events by message id (``/syncnode/fetch/1.0.0``) to close SDS gaps in seconds.

Request: one frame, message ids as ASCII hex separated by newlines (at most ``MAX_IDS``).
Response: one frame per event found (its canonical signed wire), then one empty frame.
Unknown ids are simply absent from the answer. Everything fetched goes through
``ChannelService.ingest``, which verifies id and signature before anything is stored.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence

import trio

from node.logs import kv
from node.metrics import Metrics
from node.p2p import FramedStream, P2PError, P2PHost
from node.store import EventStore
from storage import events_by_message_ids
from sync.sds import MissingEntry

__all__ = ["FETCH_PROTOCOL", "MAX_IDS", "Fetcher", "parse_request"]

log = logging.getLogger("syncnode.fetch")
FETCH_PROTOCOL = "/syncnode/fetch/1.0.0"
MAX_IDS = 256
PEERS_PER_ID = 3
GRACE_S = 1.0
_HEX = set("0123456789abcdef")


def parse_request(data: bytes) -> list[str]:
    """Decode a request frame; ``ValueError`` on anything malformed."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("fetch request is not ASCII") from None
    ids = [i for i in text.split("\n") if i]
    if len(ids) > MAX_IDS:
        raise ValueError(f"fetch request asks for {len(ids)} ids, max {MAX_IDS}")
    if any(len(i) != 64 or not set(i) <= _HEX for i in ids):
        raise ValueError("fetch request holds a malformed message id")
    return ids


class Fetcher:
    """Serves fetch requests and fetches the dependencies SDS reports missing."""

    def __init__(
        self,
        host: P2PHost,
        store: EventStore,
        metrics: Metrics,
        ingest: Callable[[bytes, str | None], str | None],
        still_missing: Callable[[str], bool],
        grace_s: float = GRACE_S,
    ) -> None:
        self.host = host
        self.store = store
        self.metrics = metrics
        self.ingest = ingest
        self.still_missing = still_missing
        self.grace_s = grace_s
        self._queue_send, self._queue = trio.open_memory_channel[tuple[float, MissingEntry]](
            math.inf
        )
        self._in_flight: set[str] = set()
        host.set_stream_handler(FETCH_PROTOCOL, self._serve)

    def want(self, _channel: str, entries: Sequence[MissingEntry]) -> None:
        due = trio.current_time() + self.grace_s
        for entry in entries:
            if entry.message_id not in self._in_flight:
                self._in_flight.add(entry.message_id)
                self._queue_send.send_nowait((due, entry))

    async def _serve(self, stream: FramedStream) -> None:
        async with stream:
            try:
                ids = parse_request(await stream.receive())
            except ValueError as exc:
                self.metrics.inc("fetch_bad_requests_total")
                log.info("bad fetch request", extra=kv(peer=stream.peer_id, error=str(exc)))
                return
            found = await self.store.read(events_by_message_ids, ids)
            for event in found:
                await stream.send(event.wire)
            await stream.send(b"")
            self.metrics.inc("fetch_served_total", len(found))

    async def run(self) -> None:
        while True:
            due, first = await self._queue.receive()
            # Most gaps close by themselves within moments (the event is in flight, or Recon
            # is delivering a whole range): only fetch what is still missing after the grace.
            await trio.sleep_until(due)
            batch = [first]
            while len(batch) < MAX_IDS:
                try:
                    batch.append(self._queue.receive_nowait()[1])
                except trio.WouldBlock:
                    break
            wanted = [e for e in batch if self.still_missing(e.message_id)]
            try:
                if wanted:
                    await self._fetch(wanted)
            finally:
                for entry in batch:
                    self._in_flight.discard(entry.message_id)

    async def _fetch(self, batch: list[MissingEntry]) -> None:
        wanted = {e.message_id for e in batch}
        connected = self.host.connected_peers()
        senders = [e.sender_id for e in batch if e.sender_id in connected]
        others = [p for p in connected if p not in senders]
        random.shuffle(others)
        # The original senders first: they certainly had the events.
        for peer in list(dict.fromkeys(senders)) + others[:PEERS_PER_ID]:
            if not wanted:
                return
            try:
                got = await self._request(peer, sorted(wanted))
            except P2PError as exc:
                self.metrics.inc("fetch_failures_total")
                log.debug("fetch failed", extra=kv(peer=peer, error=str(exc)))
                continue
            for wire in got:
                accepted = self.ingest(wire, peer)
                if accepted is not None:
                    self.metrics.inc("fetch_received_total")
                    wanted.discard(accepted)

    async def _request(self, peer: str, ids: list[str]) -> list[bytes]:
        out: list[bytes] = []
        async with await self.host.open_stream(peer, FETCH_PROTOCOL) as stream:
            await stream.send("\n".join(ids).encode("ascii"))
            while len(out) <= len(ids):
                frame = await stream.receive()
                if not frame:
                    break
                out.append(frame)
        return out
