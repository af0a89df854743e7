"""Building a hardened py-libp2p 0.8.1 host: identity, security, muxer, GossipSub tuning.

Why each choice (measured on 0.8.1, see docs/p2p.md):

* The library's default security list also accepts plaintext and SECIO dialers, so we pass
  our own: Noise only, wrapped in an admission gate that enforces ``allowed_peers`` right
  after the handshake has authenticated the remote peer id (before any stream can open).
* Yamux only, and ``max_connections_per_peer=1`` (otherwise every connect waits ~250 ms).
* GossipSub's defaults drop silently: spam protection (10 msg/s per peer and topic, applied
  even to our own publishes), adaptive gossip (stretches the heartbeat to 30-60 s), a 32-slot
  per-peer outbound queue and 32-slot subscription channels. The first two are constructor
  arguments; the queue sizes are set per host through ``node.p2p.compat`` (entry P6), which
  holds every patch of libp2p and applies them after the version check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import libp2p
import multiaddr
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from libp2p.abc import (
    IHost,
    INetConn,
    INetStream,
    INetwork,
    INotifee,
    IRawConnection,
    ISecureConn,
    ISecureTransport,
)
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.security.exceptions import HandshakeFailure
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux

from node.clock import Clock
from node.p2p import compat
from node.p2p.compat import GuardedPubsub, use_clock
from node.p2p.conns import InboundGuard
from node.p2p.frames import P2PError
from node.p2p.types import BanList, P2PConfig, P2PStats
from sync.identity import peer_id_of

__all__ = [
    "ConnectionNotifee",
    "build_host",
    "build_pubsub",
    "close_host",
    "connection_direction",
    "key_pair_from",
    "remote_address",
    "stop_auto_connector",
]

_SHUTDOWN_GRACE_S = 5.0

logger = logging.getLogger("node.p2p")


def key_pair_from(private_key: Ed25519PrivateKey) -> tuple[KeyPair, str]:
    """The libp2p ``KeyPair`` of our Ed25519 key, built from its raw 32-byte seed."""
    seed = private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    key_pair = create_new_key_pair(seed)
    peer_id = ID.from_pubkey(key_pair.public_key).to_base58()
    expected = peer_id_of(private_key)
    if peer_id != expected:
        raise P2PError(f"libp2p derived peer id {peer_id}, sync.identity says {expected}")
    return key_pair, peer_id


class _AdmissionGate(ISecureTransport):
    """Noise, plus a closed-group check on the authenticated remote peer id."""

    def __init__(
        self,
        inner: ISecureTransport,
        allowed: frozenset[str] | None,
        on_refused: Callable[[str, str, str], None],
        bans: BanList,
        guard: InboundGuard | None,
    ) -> None:
        self._inner = inner
        self._allowed = allowed
        self._on_refused = on_refused
        self._bans = bans
        self._guard = guard

    def _refusal(self, peer_id: ID) -> str | None:
        """Why ``peer_id`` may not connect: outside a closed group, or banned for a while."""
        peer = peer_id.to_base58()
        if self._allowed is not None and peer not in self._allowed:
            return "not in allowed_peers"
        return "banned" if self._bans.is_banned(peer) else None

    async def secure_inbound(self, conn: IRawConnection) -> ISecureConn:
        secure = await self._inner.secure_inbound(conn)
        remote = secure.get_remote_peer()
        if (reason := self._refusal(remote)) is not None:
            self._on_refused(remote.to_base58(), "inbound", reason)
            await secure.close()
            raise HandshakeFailure(f"peer {remote} is refused: {reason}")
        if self._guard is not None:
            address = conn.get_remote_address() if hasattr(conn, "get_remote_address") else None
            ip = str(address[0]) if address else None
            # The guard counts and logs its own refusals (a flood must not flood the log).
            if (reason := self._guard.admit(remote.to_base58(), ip)) is not None:
                await secure.close()
                raise HandshakeFailure(f"peer {remote} is refused: {reason}")
        return secure

    async def secure_outbound(self, conn: IRawConnection, peer_id: ID) -> ISecureConn:
        if (reason := self._refusal(peer_id)) is not None:
            self._on_refused(peer_id.to_base58(), "outbound", reason)
            raise HandshakeFailure(f"peer {peer_id} is refused: {reason}")
        return await self._inner.secure_outbound(conn, peer_id)


def build_host(
    key_pair: KeyPair, config: P2PConfig, on_refused: Callable[[str, str, str], None],
    bans: BanList, guard: InboundGuard | None = None,
) -> IHost:
    compat.apply()
    noise = NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)
    gate = _AdmissionGate(noise, config.allowed_peers, on_refused, bans, guard)
    # libp2p's own inbound cap is max_connections - min_connections (50): keep it above ours
    # (membership.max_inbound), which is the one that decides, evicts and counts.
    limits = config.conn_limits
    connection_config = ConnectionConfig(
        max_connections=max(300, limits.max_inbound + 100) if limits else 300,
        max_connections_per_peer=1,
        dial_timeout=config.dial_timeout,
        outbound_upgrade_timeout=config.dial_timeout,
        inbound_upgrade_timeout=config.dial_timeout,
        outbound_stream_protocol_negotiation_timeout=config.stream_open_timeout,
        inbound_stream_protocol_negotiation_timeout=config.stream_open_timeout,
    )
    host = libp2p.new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: gate},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
        listen_addrs=[multiaddr.Multiaddr(a) for a in config.listen_addrs],
        connection_config=connection_config,
        enable_mDNS=False,
        enable_upnp=False,
    )
    # SO_REUSEPORT for this host's sockets only when it punches holes (compat entry T2).
    compat.share_port(host, config.reachability is not None and config.reachability.hole_punch)
    return host


def build_pubsub(host: IHost, config: P2PConfig, clock: Clock,
                 stats: P2PStats | None = None) -> tuple[Pubsub, GossipSub]:
    compat.apply()
    use_clock(host, clock)
    # /meshsub/1.2.0 only with IDONTWANT sent early (compat G6): 0.8.1's own, after validation
    # in an RPC of its own, doubles the CPU per message (docs/p2p.md "Mesh degree").
    protocols = [PROTOCOL_ID_V11, PROTOCOL_ID]
    if config.gossip_idontwant:
        protocols.insert(0, PROTOCOL_ID_V12)
    router = GossipSub(
        protocols=protocols,
        degree=config.gossip_degree,
        degree_low=config.gossip_degree_low,
        degree_high=config.gossip_degree_high,
        heartbeat_interval=config.gossip_heartbeat_interval,  # type: ignore[arg-type]
        gossip_window=3,
        # libp2p keeps every message it saw for gossip_history heartbeats (to answer IWANT):
        # with 10, a stream of 1 MB messages (a flood, or SDS resending big events) kept
        # ten seconds of traffic in memory. IHAVE only advertises the last gossip_window, and
        # SDS repairs what gossip misses, so a little over the window is enough.
        gossip_history=4,
        spam_protection_enabled=False,
        adaptive_gossip_enabled=False,
        # Closed groups on few hosts (often one IP): IP diversity is not a signal there.
        eclipse_protection_enabled=False,
        max_pending_messages_per_peer=config.gossip_peer_queue_size,
    )
    # IHAVE/IWANT are the repair path for what the mesh missed; 10/s per peer starves it.
    router.max_iwant_requests_per_second = 10_000.0
    router.max_ihave_messages_per_second = 10_000.0
    pubsub = GuardedPubsub(
        host, router, seen_ttl=config.gossip_seen_ttl, strict_signing=config.gossip_strict_signing,
        peer_queue_size=config.gossip_peer_queue_size, stats=stats,
    )
    if config.gossip_idontwant:
        pubsub.send_idontwant_early()
    return pubsub, router


class ConnectionNotifee(INotifee):
    """Forwards libp2p connection events to two plain callbacks, which must not block."""

    def __init__(
        self, on_connected: Callable[[INetConn], None], on_disconnected: Callable[[INetConn], None]
    ) -> None:
        self._on_connected = on_connected
        self._on_disconnected = on_disconnected

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self._on_connected(conn)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        self._on_disconnected(conn)

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def listen(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None


def remote_address(conn: INetConn) -> str | None:
    try:
        addrs = conn.get_transport_addresses()
    except Exception:
        return None
    return str(addrs[0]) if addrs else None


def connection_direction(conn: INetConn) -> str:
    value = getattr(conn, "direction", None)
    name = str(getattr(value, "name", value)).lower()
    return name if name in ("inbound", "outbound") else "unknown"


async def stop_auto_connector(host: IHost) -> None:
    # libp2p would redial peerstore entries on its own to reach 150 connections; the daemon
    # decides whom to dial (allowed_peers, remembered peers, back-off).
    connector = getattr(host.get_network(), "auto_connector", None)
    if connector is not None:
        await connector.stop()


async def close_host(host: IHost) -> None:
    """``host.close()`` shielded from cancellation and bounded in time; never raises."""
    with trio.CancelScope(shield=True), trio.move_on_after(_SHUTDOWN_GRACE_S):
        try:
            await host.close()
        except Exception:
            logger.warning("closing the libp2p host failed", exc_info=True)
