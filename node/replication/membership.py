"""Membership: the address book, peer exchange and the connection manager, driven.

Every decision is in ``sync.membership``; this service feeds it the host's events and carries
its answers out: it asks each peer it dials for records (and answers those who ask), closes idle
connections, prunes above the high watermark (keeping GossipSub mesh members and peers in a
Recon session), dials address-book peers up to the low watermark, and saves the book.
Its clock is the host's (whose connection ages and manager share ``now()``); the address book,
saved beyond this process, is on ``wall()``.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable

import trio

from node.clock import Clock
from node.config.membership import MembershipSection, book_limits
from node.p2p import P2PError, P2PHost
from node.replication.addrbook_store import load_book, save_book
from node.replication.peer_activity import PEER_SERIES, PeerActivity
from node.replication.pings import PingRounds
from node.replication.px import PX_METRICS, PX_PROTOCOL, PeerExchange
from node.store.events import EventStore
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.membership import PX_JITTER, AddressBook, BookEntry, Liveness, NetworkBack, px_delay
from sync.reachability import address_scope

__all__ = ["MEMBERSHIP_METRICS", "Membership", "membership_liveness"]

log = logging.getLogger("syncnode.membership")
_VERIFY_PER_TICK = 4
_RTT_MAX_PEERS = 64
_CLOSE_TIMEOUT_S = 5.0

MEMBERSHIP_METRICS = {
    "membership_idle_closed_total": "Connections closed because the peer never spoke one of our "
                                    "protocols within membership.idle_timeout_s",
    "membership_pruned_total": "Connections closed to come back under membership.high_watermark",
    "membership_dials_total": "Address-book peers dialled, by kind (dial: to reach "
                              "membership.low_watermark; verify: a probe of the address an "
                              "inbound peer advertises) and result (ok, failed)",
    "membership_liveness_closed_total": "Connections closed because membership."
                                        "ping_failures_close pings in a row failed",
    "membership_outages_total": "Outages of our own network that ended (remote pings all "
                                "failing, then a dial or ping got through)",
    "p2p_inbound_refused_total": "Inbound connections refused after the handshake, by reason "
                                 "(peer_rate, ip_limit, inbound_limit)",
    **PX_METRICS,
}


def membership_liveness(section: MembershipSection) -> Liveness:
    """The liveness rule's state, built before the host that tells it which peers proved alive
    (``open_host(heard=liveness.heard)``) and handed to ``Membership``, built on that host."""
    return Liveness(section.ping_failures_close)


class Membership:
    def __init__(self, host: P2PHost, store: EventStore, metrics: Metrics,
                 section: MembershipSection, *, in_session: Callable[[str], bool],
                 liveness: Liveness,
                 activity: PeerActivity | None = None,
                 penalise: Callable[[str, str], object] | None = None,
                 clock: Clock) -> None:
        """``liveness``: :func:`membership_liveness`'s, the one ``host`` was opened with."""
        self.host = host
        self.clock = clock
        self.store = store
        self.metrics = metrics
        self.section = section
        self.in_session = in_session
        self.activity = activity or PeerActivity(clock=self.clock)
        self.book = AddressBook(host.peer_id, book_limits(section))
        self.rng = random.Random()
        self.liveness = liveness
        self._nursery: trio.Nursery | None = None
        self.px = PeerExchange(host, self.book, metrics, section, penalise, self.rng,
                               clock=self.clock)
        # Dials a multiaddr, returns the peer id (reachability may dial relayed ones its way).
        self.dial: Callable[[str], object] = host.connect
        self._dialing: set[str] = set()
        self._pings: PingRounds | None = None
        for name, text in MEMBERSHIP_METRICS.items():
            metrics.describe(name, "counter", text)
        for name, text in PEER_SERIES.items():
            metrics.describe(name, "gauge", text)
        metrics.gauge_fn("address_book_peers", lambda: float(len(self.book)),
                         "Peers in the address book")
        metrics.counter_fn("p2p_inbound_evicted_total", lambda: float(host.guard.evicted),
                           "Idle inbound connections closed to make room for a newcomer")
        host.set_stream_handler(PX_PROTOCOL, self.px.serve)

    async def load(self, known: list[str]) -> None:
        """Restore the saved book, then add the peers we were told about (join, bootstrap)."""
        kept = await load_book(self.store, self.book, self.section.px_record_max_bytes)
        now = self.clock.wall()
        for addr in known:
            peer = addr.rsplit("/p2p/", 1)[-1]
            self.book.offer(peer, [addr], 0, b"", "", now)
        log.info("address book loaded", extra=kv(saved=kept, peers=len(self.book)))

    def direct_addrs(self, peer_id: str) -> list[str]:
        """``peer_id``'s advertised addresses that need no relay, as dialable multiaddrs."""
        entry = self.book.entries.get(peer_id)
        if entry is None:
            return []
        return [a for a in entry.dial_addrs() if "/p2p-circuit" not in a]

    def learn(self, peer_id: str, addr: str) -> None:
        """An address proven to reach ``peer_id`` (``join`` succeeded on it)."""
        self.book.remember(peer_id)
        self.book.learn(peer_id, addr, self.clock.wall())

    async def forget(self, peer_id: str) -> None:
        """``peers forget``: out of the book, and the saved book, now; its records from peer
        exchange are refused until the operator joins it again (it may still connect to us)."""
        self.book.forget(peer_id, self.clock.wall())
        await save_book(self.store, self.book, self.clock.wall())

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._watch_peers, nursery)
            nursery.start_soon(self._housekeeping, nursery)
            nursery.start_soon(self._rtt_rounds, nursery)
            if self.section.px:
                nursery.start_soon(self._px_rounds)
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await save_book(self.store, self.book, self.clock.wall())

    async def _watch_peers(self, nursery: trio.Nursery) -> None:
        async for event in self.host.peer_events():
            now = self.clock.wall()
            entry = self.book.entries.get(event.peer_id)
            if event.kind == "disconnected":
                self.liveness.closed(event.peer_id)
                if self._pings is not None:
                    self._pings.forget(event.peer_id)
                self.activity.seen(event.peer_id, now)
                if entry is not None:
                    entry.last_seen = now
                continue
            if event.direction == "outbound" and event.address:
                # We dialled it there: that address works (an inbound one is a source port).
                self.book.learn(event.peer_id, f"{event.address}/p2p/{event.peer_id}", now)
            elif entry is not None:
                self.book.connected(event.peer_id, now)
            if self.section.px and event.direction == "outbound":
                nursery.start_soon(self.px.ask, event.peer_id)

    async def _px_rounds(self) -> None:
        """Now and then ask a random connected peer: records change as peers come and go;
        more often while we hold few connections (``sync.membership.px_schedule``)."""
        while True:
            await trio.sleep(px_delay(len(self.host.connected_peers()),
                                      self.section.low_watermark, self.section.px_interval_s,
                                      self.rng.uniform(*PX_JITTER)))
            peers = self.host.connected_peers()
            if peers:
                await self.px.ask(self.rng.choice(peers))

    async def _rtt_rounds(self, nursery: trio.Nursery) -> None:
        """Keep each connection's round-trip time fresh (``peers``, ``/metrics``) and close
        the ones whose pings keep failing (sync.membership.liveness). Concurrent: one dead
        peer's timeout must not delay the others' pings. During an outage, probe dials."""
        pings = self._pings = PingRounds(
            self.host, self.section.ping_timeout_s,
            on_ok=lambda peer: self._ping_ok(nursery, peer),
            on_failed=lambda peer, sent_at: self._ping_failed(nursery, peer, sent_at))
        next_round = self.clock.now() + self.section.ping_interval_s
        step = min(self.liveness.probe_s, self.section.ping_interval_s)
        while True:
            before = self.clock.now()
            await trio.sleep(step)
            now = self.clock.now()
            # Woken late: this process was starved (a loaded machine), pings in flight may
            # have their answers waiting unread; the liveness rule excuses their timeouts.
            if (late := now - before - step) >= self.liveness.stall_s:
                log.info("liveness timer woke late", extra=kv(late_s=round(late, 1)))
            self.liveness.stalled(now, late)
            pings.check(now)
            if self.liveness.probe_due(now):
                self._probe(nursery)
            if now >= next_round:
                next_round = now + self.section.ping_interval_s
                pings.send(nursery, self.host.connected_peers()[:_RTT_MAX_PEERS], now)

    def _remote(self, peer: str) -> bool:
        """Reached across the internet (a global address or a relay), not on our LAN."""
        info = self.host.peer_info(peer)
        parts = (info.address or "").split("/") if info is not None else []
        ip = parts[2] if len(parts) > 2 else ""
        return self.host.path(peer) == "relayed" or address_scope(ip) == "global"

    def _ping_ok(self, nursery: trio.Nursery, peer: str) -> None:
        now = self.clock.now()
        self._network_back(nursery, self.liveness.ping_ok(peer, now, self._remote(peer)))

    def _ping_failed(self, nursery: trio.Nursery, peer: str, sent_at: float) -> None:
        if self.host.peer_info(peer) is None:
            return
        closing = self.liveness.ping_failed(peer, self.clock.now(), self._remote(peer), sent_at)
        if self.liveness.last_excuse is not None:
            log.info("ping failure excused", extra=kv(peer=peer, why=self.liveness.last_excuse))
        if closing:
            self.metrics.inc("membership_liveness_closed_total")
            log.info("closing connection", extra=kv(peer=peer, why="liveness",
                                                    outage=self.liveness.in_outage))
            # Only connections older than the unanswered ping: one the peer opened since (a
            # redial through a relay after an outage) is not the dead one.
            nursery.start_soon(self._close, peer, sent_at)

    async def _close(self, peer: str, opened_before: float | None = None) -> None:
        # A dead connection's polite close would hang on writes that never drain.
        await self.host.drop(peer, _CLOSE_TIMEOUT_S, opened_before=opened_before)

    def _probe(self, nursery: trio.Nursery) -> None:
        """Our network is down (an outage): dial one known peer, whatever our connection
        count, so that the first dial that gets through tells us it is back."""
        connected = set(self.host.connected_peers())
        # Back-off ignored: the point is to learn whether anything gets through.
        for entry in self.book.candidates(math.inf, connected | self._dialing, 1, self.rng):
            self._dialing.add(entry.peer_id)
            nursery.start_soon(self._dial, entry)

    def _network_back(self, nursery: trio.Nursery, back: NetworkBack | None) -> None:
        """After an outage: close what is stuck in TCP back-off, dial everyone now."""
        if back is None:
            return
        self.metrics.inc("membership_outages_total")
        log.info("network back after an outage", extra=kv(
            outage_s=round(self.clock.now() - back.since, 1), closing=len(back.close)))
        for peer in back.close:
            nursery.start_soon(self._close, peer)
        self.book.all_due()
        self.tick(nursery, exclude=set(back.close))

    async def _housekeeping(self, nursery: trio.Nursery) -> None:
        last_save = self.clock.now()
        while True:
            await trio.sleep(self.section.housekeeping_interval_s)
            self.tick(nursery)
            if self.clock.now() - last_save >= self.section.address_book_save_interval_s:
                last_save = self.clock.now()
                await save_book(self.store, self.book, self.clock.wall())

    def tick(self, nursery: trio.Nursery, exclude: set[str] | None = None) -> None:
        host = self.host
        self.activity.export(self.metrics, host.peers())
        for reason, count in host.guard.refused.items():
            self.metrics.set("p2p_inbound_refused_total", count, reason=reason)
        for (via, reason), count in host.addr_refused.items():
            self.metrics.set("peer_addrs_refused_total", count, via=via, reason=reason)
        host.note_gossip_speakers()
        host.sweep_connections()
        connected = set(host.connected_peers()) - (exclude or set())
        protected = host.mesh_members() | {p for p in connected if self.in_session(p)}
        plan = host.guard.manager.housekeeping(self.clock.now(), protected)
        for peer, series in [(p, "membership_idle_closed_total") for p in plan.close_idle] + \
                            [(p, "membership_pruned_total") for p in plan.prune]:
            self.metrics.inc(series)
            host.guard.closed(peer)  # counted once, even if the disconnect takes a while
            log.info("closing connection", extra=kv(peer=peer, why=series.split("_")[1]))
            nursery.start_soon(host.disconnect, peer)
        self._verify_inbound(nursery, connected)
        if plan.dial:
            exclude = connected | self._dialing | {p for p in self.book.entries
                                                   if host.is_banned(p)}
            for entry in self.book.candidates(self.clock.wall(), exclude, plan.dial, self.rng):
                self._dialing.add(entry.peer_id)
                nursery.start_soon(self._dial, entry)

    def _verify_inbound(self, nursery: trio.Nursery, connected: set[str]) -> None:
        """Peers that connected to us and sent their record have not proven its addresses:
        dial one back (a probe beside the connection we have) before the entry counts as
        tried, the kind a flood of records can never displace."""
        now = self.clock.wall()
        budget = _VERIFY_PER_TICK
        for peer in sorted(connected - self._dialing):
            entry = self.book.entries.get(peer)
            if budget and entry is not None and not entry.tried and entry.next_attempt <= now \
                    and any(not r for r in entry.relayed):
                budget -= 1
                self._dialing.add(peer)
                nursery.start_soon(self._dial, entry, True)

    async def _dial(self, entry: BookEntry, verify: bool = False) -> None:
        try:
            for addr in entry.dial_addrs():
                if entry.peer_id not in self.book.entries:
                    return  # forgotten (``peers forget``) since this dial was planned
                try:
                    if verify:
                        if "/p2p-circuit" in addr:
                            continue
                        await self.host.connect(addr, verify=True)
                    else:
                        await self.dial(addr)  # type: ignore[misc]
                except P2PError as exc:
                    log.debug("dial failed", extra=kv(peer=entry.peer_id, addr=addr,
                                                      error=str(exc)))
                    continue
                self.metrics.inc("membership_dials_total", result="ok",
                                 kind="verify" if verify else "dial")
                self.book.connected(entry.peer_id, self.clock.wall())
                if self._nursery is not None:
                    self._network_back(self._nursery, self.liveness.dialled_ok())
                return
            self.metrics.inc("membership_dials_total", result="failed",
                             kind="verify" if verify else "dial")
            # Wall time: the retry is the address book's (the outage only decides whether).
            retry_at = self.liveness.dial_failed_retry_at(self.clock.wall())
            if retry_at is None:
                self.book.dial_failed(entry.peer_id, self.clock.wall())
            else:  # our own network is down: no mark against the peer
                self.book.retry_at(entry.peer_id, retry_at)
        finally:
            self._dialing.discard(entry.peer_id)
