"""The reachability driver: a short loop over the sans-IO rules of ``sync.reachability``.

Once a second it asks peers to dial us back (the evidence of the verdict), turns the relay
service on or off (``serve_relay = "auto"``: on when public), keeps reservations at relays while
not public, and hole-punches relayed connections we accepted. It decides nothing itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from node.clock import Clock
from node.p2p.dialback import DIALBACK_PROTOCOL, parse_answer
from node.p2p.frames import P2PError
from node.p2p.host import P2PHost
from node.p2p.relay import RelayLayer, connection_is_relayed, listen_port
from node.telemetry.metrics import Metrics
from sync.reachability import (
    PUBLIC,
    PunchPlanner,
    Reachability,
    RelayPlanner,
    address_scope,
)

__all__ = ["ReachabilityService"]

log = logging.getLogger("syncnode.reachability")
_TICK_S = 1.0
_ARRIVAL_GRACE_S = 5.0  # how long after a claimed success its dial-back may still arrive
# What each kind of lie costs (sync.peerscore): a mismatch is proof; an unverified success
# could also be our own listener refusing connections under a flood.
_CHARGES = {"mismatch": "dialback_lie", "unverified": "dialback_unverified"}


def _direction(conn: object) -> str:
    """``"inbound"`` or ``"outbound"`` (libp2p's connection direction), else ``""``."""
    return str(getattr(getattr(conn, "direction", None), "name", "")).lower()


def _ip_of(address: str | None) -> str | None:
    parts = (address or "").split("/")
    return parts[2] if len(parts) > 2 and parts[1] in ("ip4", "ip6") else None


class ReachabilityService:
    def __init__(self, host: P2PHost, relay: RelayLayer, metrics: Metrics,
                 clock: Clock, *,
                 announce: Callable[[str], Awaitable[object]] | None = None,
                 direct_addrs: Callable[[str], list[str]] | None = None,
                 penalise: Callable[[str, str], object] | None = None) -> None:
        self.host, self.relay = host, relay
        self.clock = clock
        self.metrics = metrics
        self.config = relay.config
        # The relay layer's, built with the host: its hole punches read this evidence.
        self.core = relay.core
        self.relays = RelayPlanner(self.config)
        self.punches = PunchPlanner(self.config)
        self.verdict: Reachability = self.core.verdict(self.clock.now())
        self.server = host.dialback_server(self._direct_ip,
                                           min_gap_s=self.config.probe_interval_s / 2,
                                           clock=self.clock)
        host.set_stream_handler(DIALBACK_PROTOCOL, self.server.handle)
        self._listen_port = listen_port(host.listen_addrs)
        self._register(metrics)
        # Hands our freshly signed record to a peer (membership's peer exchange), so that the
        # peers we joined pass our relayed addresses on without waiting for their next round.
        self.announce = announce
        # A peer's advertised direct (non-relayed) addresses (membership's address book).
        self.direct_addrs = direct_addrs
        # Charges a peer's standing (node.p2p.standing) for a dial-back lie.
        self.penalise = penalise

    def _direct_ip(self, peer: str) -> str | None:
        return _ip_of(self.relay.direct_address(peer))

    async def run(self) -> None:
        if self.config.serve_relay == "on":
            self.relay.set_serving(True)
        async with trio.open_nursery() as nursery:
            while True:
                self._tick(nursery, self.clock.now())
                await trio.sleep(_TICK_S)

    def _tick(self, nursery: trio.Nursery, now: float) -> None:
        connected = self.host.connected_peers()
        direct = [p for p in connected if self.relay.path(p) == "direct"]
        # Peers we dialled ourselves are asked first: a stranger chose to come to us.
        ours = sorted(direct, key=lambda p: not self._dialled_by_us(p))
        for peer in self.core.to_ask(ours, now):
            nursery.start_soon(self._ask, peer)
        verdict = self.core.verdict(now)
        if verdict != self.verdict:
            log.info("reachability: %s -> %s", self.verdict.value, verdict.value)
            self.verdict = verdict
        if self.config.serve_relay == "auto":
            self.relay.set_serving(verdict is PUBLIC)
        for relay in list(self.relays.reserved):
            if relay not in direct:
                self.relays.lost(relay)
                self.relay.forget(relay)
            else:
                # Our reservation lives as long as this connection: never idle for us.
                self.host.guard.spoke(relay)
        # Relays must be reachable from anywhere: only peers we reach at a global address.
        candidates = [p for p in direct if address_scope(self._direct_ip(p) or "") == "global"]
        for relay in self.relays.to_reserve(verdict, candidates, now):
            self.relays.reserved_ok(relay, now)  # in flight: not picked twice
            nursery.start_soon(self._reserve, relay)
        confirmed = self.core.confirmed_addrs(self._listen_port, now)
        if self.host.local_record.advertise(self.host.advertised_addrs(confirmed)):
            # Peer exchange hands this record out: others learn our relayed addresses.
            log.info("advertising %s", ", ".join(self.host.local_record.addrs))
            if self.announce is not None:
                for peer in direct:
                    nursery.start_soon(self.announce, peer)
        for peer in connected:
            if peer in direct:
                self.punches.direct(peer)
                continue
            accepted, dialed = self._relayed_directions(peer)
            self.punches.relayed(peer, accepted=accepted, dialed=dialed,
                                 us=self.host.peer_id, now=now, dialable=self._public(peer))
        still = set(connected)
        for peer in self.punches.planned():
            if peer not in still:
                self.punches.gone(peer)
        for peer in self.punches.due(now):
            nursery.start_soon(self._punch, peer)

    def _public(self, peer: str) -> bool:
        """The peer advertises an address on the internet (reachable without a relay)."""
        addrs = self.direct_addrs(peer) if self.direct_addrs is not None else []
        return any(address_scope(_ip_of(a) or "") == "global" for a in addrs)

    def _relayed_directions(self, peer: str) -> tuple[bool, bool]:
        """Whether a relayed connection with ``peer`` came in, and whether we opened one."""
        directions = {_direction(c) for c in self.relay.connections(peer)
                      if connection_is_relayed(c)}
        return "inbound" in directions, "outbound" in directions

    async def _ask(self, peer: str) -> None:
        if self._listen_port == 0:
            return
        asked = self.clock.now()
        try:
            async with await self.host.open_stream(peer, DIALBACK_PROTOCOL) as stream:
                await stream.send(self._listen_port.to_bytes(2, "big"))
                with trio.fail_after(self.host.config.dial_timeout * 2):
                    ok, ip = parse_answer(await stream.receive())
        except (P2PError, trio.TooSlowError) as exc:
            log.debug("dial-back request to %s failed: %s", peer, exc)
            return
        if ip == "-":
            return
        # The server answers once its side of the Noise handshake is done; ours finishes a
        # moment later. A success whose connection never came is a lie.
        arrived = await self._dialled_back(peer, asked) if ok else False
        outcome = self.core.observe(peer, ip, ok, self.clock.now(),
                                    peer_ip=self._direct_ip(peer),
                                    outbound=self._dialled_by_us(peer), arrived=arrived)
        if outcome in ("mismatch", "unverified"):
            log.warning("dial-back lie from %s (%s): claimed %s %s", peer, outcome,
                        "ok" if ok else "fail", ip)
            self.metrics.inc("dialback_lies_total", reason=outcome)
            if self.penalise is not None:
                self.penalise(peer, _CHARGES[outcome])

    async def _dialled_back(self, peer: str, since: float) -> bool:
        with trio.move_on_after(_ARRIVAL_GRACE_S):
            while self.host.guard.handshakes.get(peer, float("-inf")) < since:
                await trio.sleep(0.05)
            return True
        return False

    def _dialled_by_us(self, peer: str) -> bool:
        return any(_direction(c) == "outbound" for c in self.relay.connections(peer)
                   if not connection_is_relayed(c))

    async def _reserve(self, relay: str) -> None:
        ok = await self.relay.reserve(relay, self.host.config.dial_timeout)
        now = self.clock.now()
        if ok:
            self.relays.reserved_ok(relay, now)
            log.info("reserved a relay slot at %s", relay)
        else:
            self.relays.refused(relay, now)

    async def _punch(self, peer: str) -> None:
        # A peer on our own LAN (or a public one) needs no punch: dial what it advertises.
        began = self.clock.now()
        ok = False
        for address in self.direct_addrs(peer) if self.direct_addrs is not None else []:
            if await self.relay.dial_direct(address, peer, self.host.config.dial_timeout):
                ok = True
                break
        ok = ok or await self.relay.punch(peer)
        now = self.clock.now()
        self.punches.result(peer, ok, now)
        # How long the attempt took tells a slow failure (the library's three dial rounds,
        # about 19 s) from a quick one (refused, no stream) when a pair stays relayed.
        log.info("hole punch to %s: %s after %.1f s", peer, "direct" if ok else "failed",
                 now - began)

    def status(self) -> dict[str, Any]:
        now = self.clock.now()
        return {
            "reachability": self.verdict.value,
            "dialback": self.core.counts(now),
            "relay_serving": self.relay.serving,
            "relays": self.relays.relays(),
            "relayed_addrs": self.relay.relayed_addrs(),
            "punch": {"ok": self.relay.stats.punch_ok, "failed": self.relay.stats.punch_failed,
                      "pending": self.punches.pending()},
            "relayed_bytes": self.relay.stats.relayed_bytes,
        }

    def _register(self, metrics: Metrics) -> None:
        stats = self.relay.stats
        states = {"unknown": 0.0, "private": 1.0, "public": 2.0}
        for name, fn, text in (
            ("reachability_state", lambda: states[self.verdict.value],
             "Reachability verdict: 0 unknown, 1 private (behind NAT), 2 public"),
            ("relay_reservations", lambda: float(len(self.relays.reserved)),
             "Relays holding a reservation for us"),
            ("relay_serving", lambda: float(self.relay.serving), "1 while we serve as a relay"),
            ("peers_direct", lambda: float(self._count_path("direct")),
             "Connected peers with a direct connection"),
            ("peers_relayed", lambda: float(self._count_path("relayed")),
             "Connected peers reached only through a relay"),
        ):
            metrics.gauge_fn(name, fn, text)
        metrics.describe("dialback_lies_total", "counter",
                         "Dial-back answers refused as lies, by reason (the peer is charged)")
        for reason in ("mismatch", "unverified"):
            metrics.inc("dialback_lies_total", 0, reason=reason)
        for name, fn, text in (
            ("relay_forwarded_bytes_total", lambda: float(stats.relayed_bytes),
             "Bytes we forwarded for others as a relay"),
            ("relay_paced_seconds_total", lambda: stats.paced_s,
             "Seconds the per-circuit rate limit held relayed data back"),
            ("hole_punch_ok_total", lambda: float(stats.punch_ok),
             "Relayed connections upgraded to direct ones"),
            ("hole_punch_failed_total", lambda: float(stats.punch_failed),
             "Hole punch attempts that failed"),
            ("relay_share_refused_reservations_total",
             lambda: float(stats.share_refused["reservation"]),
             "Relay reservations refused: the source network's share was used"),
            ("relay_share_refused_circuits_total",
             lambda: float(stats.share_refused["circuit"]),
             "Relayed circuits refused: the source network's share was used"),
            ("dialback_served_total", lambda: float(self.server.served),
             "Dial-back requests we served"),
            ("dialback_refused_total", lambda: float(self.server.refused),
             "Dial-back requests we refused (relayed, malformed or too frequent)"),
        ):
            metrics.counter_fn(name, fn, text)

    def _count_path(self, path: str) -> int:
        return sum(1 for p in self.host.connected_peers() if self.relay.path(p) == path)
