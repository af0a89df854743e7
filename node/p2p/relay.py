"""Circuit relay v2 and DCUtR from py-libp2p 0.8.1, wired the way DESIGN §11 measured works.

* Every node runs ``CircuitV2Protocol`` (its STOP handler accepts relayed connections) and a
  ``CircuitV2Transport`` to dial ``.../p2p-circuit/p2p/<peer>`` addresses (the swarm's own
  connect skips them). The HOP handler (serving as a relay) is registered only while
  :meth:`RelayLayer.set_serving` says so (the daemon: when the node is public).
* The relay paces every circuit (the library enforces duration and bytes, not the rate its
  config names), closes only a circuit's own streams when it ends, and grants each source
  network a share of reservations and circuits: ``node.p2p.compat.relay.SharedRelay``.
* ``DCUtRProtocol`` serves the DCUtR stream on every node, but its auto-drive loop (which starts
  punches from both ends, and crossing punches fail) is off: the daemon calls :meth:`punch` on
  the side that accepted the relayed connection only, with its own retries
  (``node.p2p.compat.relay.ResponderDCUtR``; the overrides are entries of the compat table).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import multiaddr
import trio
from libp2p.abc import IHost, INetConn, INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL_ID
from libp2p.relay.circuit_v2.resources import RelayLimits
from libp2p.relay.circuit_v2.transport import CircuitV2Transport

from node.clock import Clock
from node.p2p.compat.relay import ResponderDCUtR, SharedRelay, check_relay_library
from node.p2p.frames import DialError
from node.p2p.relay_stats import RelayStats
from node.p2p.scope_guard import Refusals
from sync.reachability import ReachabilityConfig, ReachabilityCore

__all__ = ["RelayLayer", "RelayStats", "connection_is_relayed", "listen_port"]

logger = logging.getLogger("node.p2p.relay")


def listen_port(addrs: Iterable[str]) -> int:
    """The TCP port of the first of ``addrs`` (our listen multiaddrs) that has one, else 0."""
    for address in addrs:
        parts = address.split("/")
        if len(parts) > 4 and parts[3] == "tcp" and parts[4].isdigit():
            return int(parts[4])
    return 0


def connection_is_relayed(conn: INetConn) -> bool:
    try:
        addrs = conn.get_transport_addresses()
    except Exception:
        return False
    return bool(addrs) and all("/p2p-circuit" in str(a) for a in addrs)


class RelayLayer:
    """The relay client, the relay service (when serving) and hole punching of one host."""

    def __init__(self, host: IHost, config: ReachabilityConfig, dial_timeout: float,
                 clock: Clock, refused: Refusals | None = None, *,
                 spoke: Callable[[str], None] | None = None) -> None:
        """``spoke``: told of each peer that reserves or opens a circuit through us (it uses
        its connection: ``InboundGuard.heard_from``)."""
        check_relay_library()
        self.host = host
        self.config = config
        self.stats = RelayStats()
        limits = RelayLimits(
            duration=config.circuit_duration_s, data=config.circuit_bytes,
            max_circuit_conns=config.max_circuits, max_reservations=config.max_reservations,
            reservation_ttl=config.reservation_ttl_s,
        )
        self.protocol = SharedRelay(host, limits, config, self.stats, clock)
        self.transport = CircuitV2Transport(
            host, self.protocol, RelayConfig(roles=RelayRole.STOP | RelayRole.CLIENT))
        self.clock = clock
        # The reachability evidence (``sync.reachability``): built here, with the hole punching
        # that reads it (``punch_addrs``), so that the reachability driver, which needs the
        # running host and so comes after, feeds the same one (``ReachabilityService``).
        self.core = ReachabilityCore(config)
        self.dcutr = ResponderDCUtR(host, int(max(1, dial_timeout)),
                                     refused if refused is not None else Refusals(),
                                     punch_addrs=self._punch_addrs)
        self.serving = False
        self._nursery: trio.Nursery | None = None
        self._relay_addrs: dict[str, str] = {}  # relay peer -> our address through it
        self._spoke = spoke

    def _punch_addrs(self) -> list[str]:
        """What a hole punch tells the other side to dial (``ReachabilityCore.punch_addrs``)."""
        return self.core.punch_addrs(listen_port(str(a) for a in self.host.get_addrs()),
                                     self.clock.now())

    def services(self) -> list[Any]:
        return [self.protocol, self.dcutr]

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def set_serving(self, on: bool) -> None:
        """Serve as a relay (HOP) or stop accepting new reservations and circuits."""
        if on == self.serving:
            return
        if on:
            self.host.set_stream_handler(HOP_PROTOCOL_ID, self._serve_hop)
        else:
            self.host.remove_stream_handler(HOP_PROTOCOL_ID)
        self.serving = on
        logger.info("relay service %s", "on" if on else "off")

    async def _serve_hop(self, stream: INetStream) -> None:
        # A peer reserving or opening a circuit uses the connection: it is not idle.
        if self._spoke is not None:
            self._spoke(stream.muxed_conn.peer_id.to_base58())
        await self.protocol.serve_hop(stream)

    # -- paths ------------------------------------------------------------------------------

    def connections(self, peer_id: str) -> list[INetConn]:
        return list(self.host.get_network().get_connections(ID.from_base58(peer_id)))

    def path(self, peer_id: str) -> str | None:
        """``"direct"`` if any connection to the peer is direct, ``"relayed"``, or None."""
        conns = self.connections(peer_id)
        if not conns:
            return None
        return "relayed" if all(connection_is_relayed(c) for c in conns) else "direct"

    def direct_address(self, peer_id: str) -> str | None:
        """The remote address of a direct connection to ``peer_id``."""
        for conn in self.connections(peer_id):
            if not connection_is_relayed(conn):
                try:
                    addrs = conn.get_transport_addresses()
                except Exception:
                    continue
                if addrs:
                    return str(addrs[0])
        return None

    # -- client -----------------------------------------------------------------------------

    async def reserve(self, relay_peer: str, timeout: float) -> bool:
        """Reserve a slot at ``relay_peer`` (a connected peer); True when granted."""
        assert self._nursery is not None, "attach() first"
        relay = ID.from_base58(relay_peer)
        try:
            with trio.fail_after(timeout):
                stream = await self.host.new_stream(relay, [HOP_PROTOCOL_ID])
                try:
                    ok = await self.transport.reserve(stream, relay, self._nursery)
                finally:
                    await stream.close()
        except Exception as exc:
            logger.debug("reservation at %s failed: %s", relay_peer, exc)
            ok = False
        if ok:
            self.stats.reservations_made += 1
            if (address := self.direct_address(relay_peer)) is not None:
                me = self.host.get_id().to_base58()
                self._relay_addrs[relay_peer] = (
                    f"{address}/p2p/{relay_peer}/p2p-circuit/p2p/{me}")
        else:
            self.stats.reservations_refused += 1
            self._relay_addrs.pop(relay_peer, None)
        return ok

    def forget(self, relay_peer: str) -> None:
        self._relay_addrs.pop(relay_peer, None)

    def relayed_addrs(self) -> list[str]:
        """Our addresses through the relays we hold reservations at (what we advertise)."""
        return [self._relay_addrs[r] for r in sorted(self._relay_addrs)]

    async def dial_circuit(self, address: str, timeout: float) -> str:
        """Connect through a relay: ``/ip4/R/tcp/P/p2p/<R>/p2p-circuit/p2p/<peer>``."""
        try:
            maddr = multiaddr.Multiaddr(address)
            with trio.fail_after(timeout):
                conn = await self.transport.dial(maddr)
        except Exception as exc:
            self.stats.circuit_dials_failed += 1
            raise DialError(f"relayed dial to {address} failed: {exc}") from None
        self.stats.circuit_dials_ok += 1
        return str(conn.muxed_conn.peer_id.to_base58())

    async def dial_direct(self, address: str, peer_id: str, timeout: float) -> bool:
        """A new direct connection to ``peer_id`` at ``address`` even though a relayed one
        exists (libp2p's connect would just return that one); True when it is direct now."""
        try:
            with trio.fail_after(timeout):
                await self.host.get_network().dial_addr(
                    multiaddr.Multiaddr(address), ID.from_base58(peer_id))
        except Exception as exc:
            logger.debug("direct dial to %s at %s failed: %s", peer_id, address, exc)
        return self.path(peer_id) == "direct"

    async def punch(self, peer_id: str) -> bool:
        """One DCUtR attempt (we are the side that accepted the relayed connection)."""
        # The library caches "directly connected" per peer and answers True at once while the
        # entry stays; a direct connection closed without libp2p's notification (a dead one,
        # closed by liveness during an outage) leaves it stale, and every later punch "fails".
        if self.path(peer_id) != "direct":
            self.dcutr.forget_direct(ID.from_base58(peer_id))
        try:
            ok = bool(await self.dcutr.initiate_hole_punch(ID.from_base58(peer_id)))
        except Exception as exc:
            logger.debug("hole punch to %s failed: %s", peer_id, exc)
            ok = False
        # The library counts attempts per peer and stops at 5; our planner decides instead.
        self.dcutr.forget_attempts(ID.from_base58(peer_id))
        ok = ok and self.path(peer_id) == "direct"
        if ok:
            self.stats.punch_ok += 1
        else:
            self.stats.punch_failed += 1
        return ok
