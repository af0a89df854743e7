"""Peer exchange (``/syncnode/px/1.0.0``): hand connected peers signed peer records, take
theirs into the address book.

Only records signed by the peer they describe count (``node.p2p.records.open_record``), and
of their addresses only those in the sender's scope (``sync.membership.scope``: no loopback
address from a remote peer, a private one only from that private network); what to keep is
the address book's decision (``sync.membership.AddressBook``: bounded per source,
per network and in all). A peer that sends malformed frames or badly signed records is
penalised like any protocol violation. Wire format: ``sync.membership.px_wire``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import trio

from node.clock import Clock
from node.config.membership import MembershipSection
from node.p2p import FramedStream, P2PError, P2PHost
from node.p2p.records import RecordError, open_record
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.errors import RemoteProtocolError
from sync.membership import AddressBook, decode_records, encode_records
from sync.membership.scope import addr_refusal

__all__ = ["PX_METRICS", "PX_PROTOCOL", "PeerExchange"]

PX_PROTOCOL = "/syncnode/px/1.0.0"
_TIMEOUT_S = 10.0
_MAX_SERVING = 8
log = logging.getLogger("syncnode.membership")

PX_METRICS = {
    "px_records_total": "Signed peer records received through peer exchange, by outcome (the "
                        "address book's verdict; invalid: bad signature or key; out_of_scope: "
                        "no address the sender may make us dial; forgotten: a peer the "
                        "operator forgot)",
    "peer_addrs_refused_total": "Addresses a peer told us that we will not dial, by via (px, "
                                "dht, observed, punch, gossip_px) and reason (loopback, "
                                "private, link_local, dns, invalid: outside the scope of the "
                                "peer's own address; ignored: GossipSub PX is never used)",
    "px_exchanges_total": "Peer exchanges, by role (asked, served) and result (ok, failed, "
                          "busy: one with that peer running already, or too many)",
}


class PeerExchange:
    def __init__(self, host: P2PHost, book: AddressBook, metrics: Metrics,
                 section: MembershipSection,
                 penalise: Callable[[str, str], object] | None = None,
                 rng: random.Random | None = None, *, clock: Clock) -> None:
        self.host = host
        self.clock = clock  # wall(): the address book's times
        self.rng = rng or random.Random()
        self._serving: set[str] = set()
        self.book = book
        self.metrics = metrics
        self.section = section
        self.penalise = penalise or (lambda _peer, _reason: None)

    def _answer(self, asker: str) -> bytes:
        connected = set(self.host.connected_peers())
        shared = [e.record for e in self.book.shareable(self.section.px_max_records, connected,
                                                     self.rng)
                  if e.peer_id != asker][: self.section.px_max_records - 1]
        return encode_records([self.host.local_record.envelope, *shared])

    async def serve(self, stream: FramedStream) -> None:
        peer = stream.peer_id
        # One exchange per peer at a time, a few in all: answering costs a sort of the book.
        if peer in self._serving or len(self._serving) >= _MAX_SERVING:
            self.metrics.inc("px_exchanges_total", role="served", result="busy")
            return
        self._serving.add(peer)
        try:
            await self._serve(stream, peer)
        finally:
            self._serving.discard(peer)

    async def _serve(self, stream: FramedStream, peer: str) -> None:
        try:
            with trio.fail_after(_TIMEOUT_S):
                request = await stream.receive()
                # The request holds the asker's own record, nothing else.
                self.consider(decode_records(request, 1, self.section.px_record_max_bytes),
                              peer, own_only=True)
                await stream.send(self._answer(peer))
        except RemoteProtocolError as exc:
            self._bad(peer, "served", exc)
            return
        except (P2PError, trio.TooSlowError):
            self.metrics.inc("px_exchanges_total", role="served", result="failed")
            return
        self.metrics.inc("px_exchanges_total", role="served", result="ok")

    async def ask(self, peer: str) -> int:
        """One exchange with ``peer``; returns how many records the book took."""
        try:
            with trio.fail_after(_TIMEOUT_S):
                async with await self.host.open_stream(peer, PX_PROTOCOL) as stream:
                    await stream.send(encode_records([self.host.local_record.envelope]))
                    answer = await stream.receive()
            taken = self.consider(decode_records(answer, self.section.px_max_records,
                                                 self.section.px_record_max_bytes), peer)
        except RemoteProtocolError as exc:
            self._bad(peer, "asked", exc)
            return 0
        except (P2PError, trio.TooSlowError) as exc:
            self.metrics.inc("px_exchanges_total", role="asked", result="failed")
            log.debug("peer exchange failed", extra=kv(peer=peer, error=str(exc)))
            return 0
        self.metrics.inc("px_exchanges_total", role="asked", result="ok")
        return taken

    def _bad(self, peer: str, role: str, exc: RemoteProtocolError) -> None:
        self.metrics.inc("px_exchanges_total", role=role, result="failed")
        self.penalise(peer, "protocol")
        log.info("bad peer exchange", extra=kv(peer=peer, error=exc.reason))

    def _in_scope(self, addrs: tuple[str, ...], source: str) -> list[str]:
        """The addresses ``source`` may make us dial (sync.membership.scope); the others are
        counted, not charged: an honest peer passes on records listing LAN addresses."""
        origin = self.host.source_ip(source)
        kept = []
        for addr in addrs:
            if (reason := addr_refusal(addr, origin)) is None:
                kept.append(addr)
            else:
                self.host.addr_refused["px", reason] += 1
        return kept

    def consider(self, records: list[bytes], source: str, *, own_only: bool = False) -> int:
        """Verify each record and offer it to the book; returns how many it took."""
        taken = 0
        now = self.clock.wall()
        for data in records:
            try:
                record = open_record(data, self.section.px_record_max_bytes)
            except RecordError as exc:
                self.metrics.inc("px_records_total", outcome="invalid")
                self.penalise(source, "protocol")
                log.info("invalid peer record", extra=kv(peer=source, error=str(exc)))
                continue
            if own_only and record.peer_id != source:
                self.metrics.inc("px_records_total", outcome="invalid")
                continue
            addrs = self._in_scope(record.addrs, source)
            if not addrs:
                self.metrics.inc("px_records_total", outcome="out_of_scope")
                continue
            outcome = self.book.offer(record.peer_id, addrs, record.seq, record.envelope,
                                      source, now)
            self.metrics.inc("px_records_total", outcome=outcome)
            taken += outcome in ("added", "updated")
        return taken
