"""Circuit relay v2 and DCUtR from py-libp2p 0.8.1, wired the way DESIGN §11 measured works.

* Every node runs ``CircuitV2Protocol`` (its STOP handler accepts relayed connections) and a
  ``CircuitV2Transport`` to dial ``.../p2p-circuit/p2p/<peer>`` addresses (the swarm's own
  connect skips them). The HOP handler (serving as a relay) is registered only while
  :meth:`RelayLayer.set_serving` says so (the daemon: when the node is public).
* The library enforces a circuit's duration and bytes but not the rate its config names:
  :class:`_PacedRelay` paces every forwarded read with :class:`sync.reachability.RateGate`.
* The library files a circuit's streams under each end's peer id, so the end of one circuit
  closed whichever circuit last named that peer (:class:`_CircuitStreams` says why); each
  circuit closes only its own streams here.
* ``DCUtRProtocol`` serves the DCUtR stream on every node, but its auto-drive loop (which starts
  punches from both ends, and crossing punches fail) is off: the daemon calls :meth:`punch` on
  the side that accepted the relayed connection only, with its own retries.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import multiaddr
import trio
from libp2p.abc import IHost, INetConn, INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.dcutr import MAX_OBSERVED_ADDRS as _MAX_OBS_ADDRS
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL_ID
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.resources import RelayLimits
from libp2p.relay.circuit_v2.transport import CircuitV2Transport

from node.clock import Clock, SystemClock
from node.p2p.compat.version import check_libp2p_version
from node.p2p.frames import DialError, P2PError
from node.p2p.scope_guard import Refusals, punch_refusal
from sync.networks import NetworkShare, network_of
from sync.reachability import RateGate, ReachabilityConfig, address_scope

__all__ = ["RelayLayer", "RelayStats", "connection_is_relayed"]

logger = logging.getLogger("node.p2p.relay")


class RelayStats:
    """Counters of relaying, for /metrics."""

    def __init__(self) -> None:
        self.relayed_bytes = 0  # bytes we forwarded for others as a relay
        self.paced_s = 0.0  # seconds our rate limit held circuits back
        self.reservations_made = 0
        self.reservations_refused = 0
        self.punch_ok = 0
        self.punch_failed = 0
        self.circuit_dials_ok = 0
        self.circuit_dials_failed = 0
        # Refused because the source network's share was used, by "reservation"/"circuit".
        self.share_refused: Counter[str] = Counter()


class _CircuitStreams(dict[ID, tuple[INetStream, INetStream | None]]):
    """py-libp2p 0.8.1's ``_active_relays``, kept for its stop() but never matched by the
    clean-up at the end of ``_relay_data``.

    The library files each circuit's streams under the source's and the destination's peer id,
    and when either direction of a circuit ends it closes the streams filed under *its* peer:
    by then often another circuit's (the newest one to or from the same peer, through this
    relay). After an outage, each stale circuit of the cut-off home that died closed the
    fresh circuit of another pair a second or two after it was set up (scenario 3: h0 to h3
    relayed, closed after each redial for ~30 s, by no rule of ours). :class:`_PacedRelay`
    closes a circuit's own two streams instead."""

    def __contains__(self, key: object) -> bool:
        return False


class _PacedRelay(CircuitV2Protocol):
    """``CircuitV2Protocol`` that forwards at most ``rate`` bytes/s per source stream, and
    whose circuits end closing their own streams only (:class:`_CircuitStreams`)."""

    def __init__(self, host: IHost, limits: RelayLimits, rate: int, stats: RelayStats,
                 clock: Clock) -> None:
        super().__init__(host, limits=limits, allow_hop=False)
        self._clock = clock
        check_libp2p_version()
        self._active_relays = _CircuitStreams()
        self._rate = rate
        self._gates: dict[int, RateGate] = {}
        self._stats = stats

    async def _read_stream_with_retry(self, stream: INetStream, max_retries: int = 3
                                      ) -> bytes | None:
        data: bytes | None = await super()._read_stream_with_retry(stream, max_retries)
        if not data:
            self._gates.pop(id(stream), None)
            return data
        now = self._clock.now()
        gate = self._gates.get(id(stream))
        if gate is None:
            if len(self._gates) > 4 * self.limits.max_circuit_conns:
                self._gates.clear()  # stale entries of closed circuits
            gate = self._gates[id(stream)] = RateGate(self._rate, self._rate, now)
        self._stats.relayed_bytes += len(data)
        if (wait := gate.delay(len(data), now)) > 0:
            self._stats.paced_s += wait
            await trio.sleep(wait)
        return data

    async def _relay_data(self, src_stream: INetStream, dst_stream: INetStream, peer_id: ID,
                          deadline: float | None = None,
                          circuit_data_limit: list[int] | None = None) -> None:
        try:
            await super()._relay_data(src_stream, dst_stream, peer_id, deadline,
                                      circuit_data_limit)
        finally:
            # Ours only: the other direction then reads EOF and ends too.
            with trio.CancelScope(shield=True):
                await self._close_stream(src_stream)
                await self._close_stream(dst_stream)
            for key, pair in list(self._active_relays.items()):
                if src_stream in pair or dst_stream in pair:
                    del self._active_relays[key]


def _stream_ip(stream: INetStream) -> str | None:
    """The remote IP of the connection ``stream`` runs on."""
    try:
        address = stream.get_remote_address()
    except Exception:
        return None
    return str(address[0]) if address else None


class _SharedRelay(_PacedRelay):
    """:class:`_PacedRelay` that grants each source network (``sync.networks``) at most a
    share of its reservations and circuits: without it, identities from one machine (free)
    took 32 of 34 reservations. Refusals answer ``RESOURCE_LIMIT_EXCEEDED`` and are counted
    in ``stats.share_refused``."""

    def __init__(self, host: IHost, limits: RelayLimits, config: ReachabilityConfig,
                 stats: RelayStats, clock: Clock) -> None:
        super().__init__(host, limits, config.circuit_rate_bytes_s, stats, clock)
        self._config = config
        self.reservations = NetworkShare(config.relay_reservations_per_network)
        self.circuits = NetworkShare(config.relay_circuits_per_network)

    def _network(self, stream: INetStream) -> str | None:
        return network_of(_stream_ip(stream), self._config.relay_share_prefix_v4,
                          self._config.relay_share_prefix_v6)

    async def _refuse(self, stream: INetStream, what: str) -> None:
        self._stats.share_refused[what] += 1
        logger.debug("relay %s refused to %s: its network's share is used",
                     what, stream.muxed_conn.peer_id)
        await self._send_status(stream, StatusCode.RESOURCE_LIMIT_EXCEEDED,
                                f"this network's share of {what}s is used")

    async def _handle_reserve(self, stream: INetStream, msg: HopMessage) -> None:
        peer = stream.muxed_conn.peer_id
        if msg.HasField("peer") and msg.peer.id and ID(msg.peer.id) != peer:
            # The library would reserve for the peer the message names, outside any share.
            await self._refuse(stream, "reservation")
            return
        # Reservations end by expiry inside the library: release theirs first.
        held = self.resource_manager._reservations
        self.reservations.keep_only({p for p, r in list(held.items()) if not r.is_expired()})
        if not self.reservations.take(peer, self._network(stream)):
            await self._refuse(stream, "reservation")
            return
        await super()._handle_reserve(stream, msg)
        if peer not in held:
            self.reservations.release(peer)

    async def _handle_connect(self, stream: INetStream, msg: HopMessage) -> None:
        if not self.circuits.take(stream, self._network(stream)):
            await self._refuse(stream, "circuit")
            await trio.sleep(0.5)  # as the library does: the peer reads the status first
            await stream.reset()
            return
        try:
            await super()._handle_connect(stream, msg)
        finally:
            self.circuits.release(stream)


class _ResponderDCUtR(DCUtRProtocol):
    """DCUtR that answers punches but never starts one by itself (we drive, one side only),
    and tells the other side our external addresses from our own evidence first
    (``punch_addrs``: :meth:`sync.reachability.ReachabilityCore.punch_addrs`)."""

    def __init__(self, host: IHost, dial_timeout: int, refused: Refusals) -> None:
        super().__init__(host, dial_timeout=dial_timeout)
        self.punch_addrs: Callable[[], list[str]] = lambda: []
        self.refused = refused

    async def _dial_peer(self, peer_id: ID, addr: multiaddr.Multiaddr,
                         source: tuple[str, int] | None = None,
                         as_responder: bool = False) -> None:
        # Every punch dial (the peer's CONNECT addresses, identify's listen addresses) passes
        # here: the peer may aim it only within its own scope (node.p2p.scope_guard).
        if (reason := punch_refusal(self.host, peer_id, str(addr))) is not None:
            self.refused["punch", reason] += 1
            logger.debug("refused punch dial of %s at %s: %s", peer_id, addr, reason)
            return
        await super()._dial_peer(peer_id, addr, source, as_responder)

    async def _auto_drive_loop(self) -> None:
        return None

    async def _try_unilateral_upgrade(self, peer_id: ID) -> bool:
        # The library first dials every direct address in the peerstore, for up to the dial
        # timeout (10 s), before the DCUtR exchange. Those include the NAT addresses an
        # earlier punch learnt (kept 10 minutes), which no unsolicited dial gets through: every
        # punch after the first with a peer hung there 10 s (scenario 3's re-punch after an
        # outage: 10 s of this, then 0.2 s of exchange; a failed attempt cost the next one
        # 10 s more, past the minute). ReachabilityService._punch dials the addresses the
        # peer advertises itself before calling us.
        return False

    async def _have_direct_connection(self, peer_id: ID) -> bool:
        # The library trusts its cache of punched peers, and a direct connection closed
        # without its notification (a dead one, closed by liveness in an outage) stays there:
        # as the answering side we then closed every later punch's stream at once ("already
        # direct") and the pair stayed relayed (scenario 3: four homes' punches to the
        # cut-off node failed for a minute). Ask the swarm instead.
        if await self._verify_direct_connection(peer_id):
            return True
        self._direct_connections.discard(peer_id)
        return False

    async def _get_observed_addrs(self) -> list[bytes]:
        # The library's own list, after an outage, holds only what LAN neighbours see
        # (sync/reachability.py: punch_addrs says why); ours go first.
        # With no observation the library falls back to our listen addresses: a wildcard
        # one (0.0.0.0) would have the other side dial itself. Only what a peer can dial.
        theirs = [a for a in await super()._get_observed_addrs() if _dialable(a)]
        ours: list[bytes] = []
        for address in self.punch_addrs():
            with contextlib.suppress(Exception):
                ours.append(multiaddr.Multiaddr(address).to_bytes())
        out = list(dict.fromkeys(ours + theirs))
        return out[:_MAX_OBS_ADDRS]


def _dialable(address: bytes) -> bool:
    try:
        ip = str(multiaddr.Multiaddr(address)).split("/")[2]
    except Exception:
        return False
    return address_scope(ip) not in ("unspecified", "invalid")


def connection_is_relayed(conn: INetConn) -> bool:
    try:
        addrs = conn.get_transport_addresses()
    except Exception:
        return False
    return bool(addrs) and all("/p2p-circuit" in str(a) for a in addrs)


def _check_library() -> None:
    """The private names our subclasses override or use must still be there (0.8.1 only)."""
    check_libp2p_version()
    for cls, name in ((CircuitV2Protocol, "_read_stream_with_retry"),
                      (CircuitV2Protocol, "_handle_hop_stream"),
                      (CircuitV2Protocol, "_handle_reserve"),
                      (CircuitV2Protocol, "_handle_connect"),
                      (DCUtRProtocol, "_auto_drive_loop"),
                      (DCUtRProtocol, "_get_observed_addrs"),
                      (DCUtRProtocol, "_try_unilateral_upgrade"),
                      (DCUtRProtocol, "_dial_peer")):
        if not callable(getattr(cls, name, None)):
            raise P2PError(f"libp2p {cls.__name__}.{name} is gone: node.p2p.relay needs review")


class RelayLayer:
    """The relay client, the relay service (when serving) and hole punching of one host."""

    def __init__(self, host: IHost, config: ReachabilityConfig, dial_timeout: float,
                 clock: Clock | None = None, refused: Refusals | None = None) -> None:
        _check_library()
        self.host = host
        self.config = config
        self.stats = RelayStats()
        limits = RelayLimits(
            duration=config.circuit_duration_s, data=config.circuit_bytes,
            max_circuit_conns=config.max_circuits, max_reservations=config.max_reservations,
            reservation_ttl=config.reservation_ttl_s,
        )
        self.protocol = _SharedRelay(host, limits, config, self.stats, clock or SystemClock())
        self.transport = CircuitV2Transport(
            host, self.protocol, RelayConfig(roles=RelayRole.STOP | RelayRole.CLIENT))
        self.dcutr = _ResponderDCUtR(host, int(max(1, dial_timeout)),
                                     refused if refused is not None else Refusals())
        for name in ("_direct_connections", "_hole_punch_attempts"):  # used in punch()
            if not hasattr(self.dcutr, name):
                raise P2PError(f"libp2p DCUtRProtocol.{name} is gone: node.p2p.relay needs review")
        self.serving = False
        self._nursery: trio.Nursery | None = None
        self._relay_addrs: dict[str, str] = {}  # relay peer -> our address through it
        # Marks a peer as having spoken one of our protocols (the connection manager's
        # idle rule); the host sets it.
        self.on_spoke: Callable[[str], None] = lambda _peer: None

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
        self.on_spoke(stream.muxed_conn.peer_id.to_base58())
        await self.protocol._handle_hop_stream(stream)

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
            self.dcutr._direct_connections.discard(ID.from_base58(peer_id))
        try:
            ok = bool(await self.dcutr.initiate_hole_punch(ID.from_base58(peer_id)))
        except Exception as exc:
            logger.debug("hole punch to %s failed: %s", peer_id, exc)
            ok = False
        # The library counts attempts per peer and stops at 5; our planner decides instead.
        self.dcutr._hole_punch_attempts.pop(ID.from_base58(peer_id), None)
        ok = ok and self.path(peer_id) == "direct"
        if ok:
            self.stats.punch_ok += 1
        else:
            self.stats.punch_failed += 1
        return ok
