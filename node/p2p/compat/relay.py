"""Circuit relay v2 and DCUtR of py-libp2p 0.8.1, overridden (entries C1-C4 and D1-D6 of the
table in ``node.p2p.compat``; ``node.p2p.relay`` wires them, docs/upstream.md has each defect).

* C1 ``CircuitV2Protocol._read_stream_with_retry``: the library enforces a circuit's duration
  and bytes but not the rate its config names: :class:`PacedRelay` paces every forwarded read
  with :class:`sync.reachability.RateGate`.
* C2 ``_relay_data`` and ``_active_relays``: the library files a circuit's streams under each
  end's peer id, so the end of one circuit closed whichever circuit last named that peer
  (:class:`CircuitStreams` says why); each circuit closes only its own streams here.
* C3 ``_handle_reserve``, ``_handle_connect``, ``_send_status``,
  ``resource_manager._reservations``: :class:`SharedRelay` grants each source network a share.
* C4 ``_handle_hop_stream``: the HOP handler we register only while serving
  (:meth:`PacedRelay.serve_hop`).
* D1-D6 ``DCUtRProtocol``: :class:`ResponderDCUtR` answers punches but starts none
  (``_auto_drive_loop``), skips the library's blind pre-dial (``_try_unilateral_upgrade``),
  asks the swarm rather than its stale cache (``_have_direct_connection``), offers our own
  evidence of our addresses first (``_get_observed_addrs``), checks every punch dial's scope
  (``_dial_peer``) and lets us reset its per-peer cache and attempt count
  (:meth:`ResponderDCUtR.forget_direct`, :meth:`ResponderDCUtR.forget_attempts`:
  ``_direct_connections``, ``_hole_punch_attempts``).
* D7 ``_perform_hole_punch`` (wrapped) and ``_dial_peer``: each address is dialled once per
  attempt, and that dial lasts until the attempt ends (:class:`PunchAttempt`), not one dial
  timeout per round.

Checked by :func:`check_relay_library` (after the version check) when a relay layer is built.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import multiaddr
import trio
from libp2p.abc import IHost, INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import MAX_OBSERVED_ADDRS as _MAX_OBS_ADDRS
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.resources import RelayLimits

from node.clock import Clock
from node.p2p.compat.version import check_libp2p_version
from node.p2p.frames import P2PError
from node.p2p.relay_stats import RelayStats
from node.p2p.scope_guard import Refusals, punch_refusal
from sync.networks import NetworkShare, network_of
from sync.reachability import RateGate, ReachabilityConfig, address_scope

__all__ = ["PacedRelay", "ResponderDCUtR", "SharedRelay", "check_relay_library"]

logger = logging.getLogger("node.p2p.relay")


class CircuitStreams(dict[ID, tuple[INetStream, INetStream | None]]):
    """py-libp2p 0.8.1's ``_active_relays``, kept for its stop() but never matched by the
    clean-up at the end of ``_relay_data``.

    The library files each circuit's streams under the source's and the destination's peer id,
    and when either direction of a circuit ends it closes the streams filed under *its* peer:
    by then often another circuit's (the newest one to or from the same peer, through this
    relay). After an outage, each stale circuit of the cut-off home that died closed the
    fresh circuit of another pair a second or two after it was set up (scenario 3: h0 to h3
    relayed, closed after each redial for ~30 s, by no rule of ours). :class:`PacedRelay`
    closes a circuit's own two streams instead."""

    def __contains__(self, key: object) -> bool:
        return False


class PacedRelay(CircuitV2Protocol):
    """``CircuitV2Protocol`` that forwards at most ``rate`` bytes/s per source stream, and
    whose circuits end closing their own streams only (:class:`CircuitStreams`)."""

    def __init__(self, host: IHost, limits: RelayLimits, rate: int, stats: RelayStats,
                 clock: Clock) -> None:
        super().__init__(host, limits=limits, allow_hop=False)
        self._clock = clock
        self._active_relays = CircuitStreams()
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

    async def serve_hop(self, stream: INetStream) -> None:
        """The library's HOP handler (registered by us only while we serve as a relay)."""
        await self._handle_hop_stream(stream)


def stream_ip(stream: INetStream) -> str | None:
    """The remote IP of the connection ``stream`` runs on."""
    try:
        address = stream.get_remote_address()
    except Exception:
        return None
    return str(address[0]) if address else None


class SharedRelay(PacedRelay):
    """:class:`PacedRelay` that grants each source network (``sync.networks``) at most a
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
        return network_of(stream_ip(stream), self._config.relay_share_prefix_v4,
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


class PunchAttempt:
    """The dials of one hole-punch attempt with one peer (``ResponderDCUtR``, D7)."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.dialing: set[str] = set()  # addresses with a dial under way


class ResponderDCUtR(DCUtRProtocol):
    """DCUtR that answers punches but never starts one by itself (we drive, one side only),
    and tells the other side our external addresses from our own evidence first
    (``punch_addrs``: :meth:`sync.reachability.ReachabilityCore.punch_addrs`)."""

    def __init__(self, host: IHost, dial_timeout: int, refused: Refusals, *,
                 punch_addrs: Callable[[], list[str]]) -> None:
        super().__init__(host, dial_timeout=dial_timeout)
        for name in ("_direct_connections", "_hole_punch_attempts"):  # forget_*
            if not hasattr(self, name):
                raise P2PError(f"libp2p DCUtRProtocol.{name} is gone: re-check {__name__}")
        self.punch_addrs = punch_addrs
        self.refused = refused
        self._attempts: dict[ID, PunchAttempt] = {}

    async def _perform_hole_punch(self, peer_id: ID, addrs: list[multiaddr.Multiaddr],
                                  as_responder: bool = False) -> bool:
        # The punch dials of this attempt run in a nursery of its own that outlives the
        # library's rounds (D7): each address is dialled once, and that dial stays in SYN-SENT
        # until the attempt ends, so the other side's SYN, however late, meets it.
        async with trio.open_nursery() as nursery:
            attempt = PunchAttempt(nursery)
            previous = self._attempts.get(peer_id)
            self._attempts[peer_id] = attempt
            try:
                return bool(await super()._perform_hole_punch(peer_id, addrs, as_responder))
            finally:
                if self._attempts.get(peer_id) is attempt:
                    if previous is None:
                        del self._attempts[peer_id]
                    else:
                        self._attempts[peer_id] = previous
                nursery.cancel_scope.cancel()

    async def _dial_peer(self, peer_id: ID, addr: multiaddr.Multiaddr,
                         source: tuple[str, int] | None = None,
                         as_responder: bool = False) -> None:
        # Every punch dial (the peer's CONNECT addresses, identify's listen addresses) passes
        # here: the peer may aim it only within its own scope (node.p2p.scope_guard).
        if (reason := punch_refusal(self.host, peer_id, str(addr))) is not None:
            self.refused["punch", reason] += 1
            logger.debug("refused punch dial of %s at %s: %s", peer_id, addr, reason)
            return
        attempt = self._attempts.get(peer_id)
        if attempt is None:  # not inside an attempt: the library's own dial
            await super()._dial_peer(peer_id, addr, source, as_responder)
            return
        if str(addr) not in attempt.dialing:
            attempt.dialing.add(str(addr))
            attempt.nursery.start_soon(self._lasting_dial, attempt, peer_id, addr, source,
                                       as_responder)

    async def _lasting_dial(self, attempt: PunchAttempt, peer_id: ID,
                            addr: multiaddr.Multiaddr, source: tuple[str, int] | None,
                            as_responder: bool) -> None:
        """One punch dial with no timeout of its own: the attempt's end cancels it. The
        library's ``_dial_peer`` less its ``fail_after(dial_timeout)`` (the defect: it cannot
        be called without one) and its 0.1-s pause before the check."""
        store = self.host.get_peerstore()
        known = list(store.addrs(peer_id))
        network = self.host.get_network()
        try:
            if as_responder:
                await network.dial_addr_as_responder(addr, peer_id, source)
            else:
                await network.dial_addr(addr, peer_id, source)
        except Exception as exc:
            logger.debug("punch dial of %s at %s failed: %s", peer_id, addr, exc)
            # The swarm drops every address of a peer on an id mismatch (one wrong address
            # the peer offered): keep the others for the rest of the attempt.
            if "mismatch" in str(exc).lower() and known:
                store.add_addrs(peer_id, known, 600)
            attempt.dialing.discard(str(addr))  # a later round may dial it again
            return
        if await self._verify_direct_connection(peer_id):
            self._direct_connections.add(peer_id)

    async def _auto_drive_loop(self) -> None:
        return None

    def forget_direct(self, peer_id: ID) -> None:
        """Drop the library's "directly connected" cache entry of ``peer_id``."""
        self._direct_connections.discard(peer_id)

    def forget_attempts(self, peer_id: ID) -> None:
        """Reset the library's count of punch attempts to ``peer_id`` (it stops at 5)."""
        self._hole_punch_attempts.pop(peer_id, None)

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
        theirs = [a for a in await super()._get_observed_addrs() if dialable(a)]
        ours: list[bytes] = []
        for address in self.punch_addrs():
            with contextlib.suppress(Exception):
                ours.append(multiaddr.Multiaddr(address).to_bytes())
        out = list(dict.fromkeys(ours + theirs))
        return out[:_MAX_OBS_ADDRS]


def dialable(address: bytes) -> bool:
    try:
        ip = str(multiaddr.Multiaddr(address)).split("/")[2]
    except Exception:
        return False
    return address_scope(ip) not in ("unspecified", "invalid")


def check_relay_library() -> None:
    """The private names our subclasses override or use must still be there (0.8.1 only)."""
    check_libp2p_version()
    for cls, name in ((CircuitV2Protocol, "_read_stream_with_retry"),
                      (CircuitV2Protocol, "_handle_hop_stream"),
                      (CircuitV2Protocol, "_handle_reserve"),
                      (CircuitV2Protocol, "_handle_connect"),
                      (DCUtRProtocol, "_auto_drive_loop"),
                      (DCUtRProtocol, "_get_observed_addrs"),
                      (DCUtRProtocol, "_try_unilateral_upgrade"),
                      (DCUtRProtocol, "_dial_peer"),
                      (DCUtRProtocol, "_perform_hole_punch"),
                      (DCUtRProtocol, "_verify_direct_connection")):
        if not callable(getattr(cls, name, None)):
            raise P2PError(f"libp2p {cls.__name__}.{name} is gone: re-check {__name__}")


