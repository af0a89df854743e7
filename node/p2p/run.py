"""Starting and stopping a :class:`node.p2p.host.P2PHost`: :func:`open_host`."""

from __future__ import annotations

import functools
import math
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import multiaddr
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.tools.anyio_service import background_trio_service

from node.clock import Clock
from node.leaves import leaf_exceptions
from node.p2p import compat
from node.p2p.addrs import unbindable_listen_addr
from node.p2p.conns import Heard, InboundGuard
from node.p2p.dht import Discovery
from node.p2p.dialer import count_refusal
from node.p2p.frames import P2PError
from node.p2p.host import P2PHost
from node.p2p.relay import RelayLayer
from node.p2p.scope_guard import Refusals, guard_gossip_px, guard_observed_addrs
from node.p2p.scoring import PeerScoring
from node.p2p.setup import (
    ConnectionNotifee,
    build_host,
    build_pubsub,
    close_host,
    key_pair_from,
    stop_auto_connector,
)
from node.p2p.types import BanList, P2PConfig, P2PStats

__all__ = ["open_host"]


@asynccontextmanager
async def open_host(
    private_key: Ed25519PrivateKey, config: P2PConfig | None = None, *, clock: Clock,
    heard: Heard | None = None, scoring: PeerScoring | None = None,
) -> AsyncIterator[P2PHost]:
    """Start a host with ``private_key``'s identity; stop it, releasing every socket, on exit.

    The host's background tasks run in a nursery owned by this context manager. Every part of
    it that keeps time (bans, the connection manager, connection ages, relay pacing, the record
    cache, ping round trips) reads ``clock``: the node's one clock (``node.clock``).

    What the host learns of peers goes where it is told here, for the services built on it
    after: ``heard`` is told ``(peer, now)`` each time a peer proves alive on its connection
    (membership's liveness), ``scoring`` is charged with the transport's violations.
    """
    config = config or P2PConfig()
    compat.apply()
    compat.set_libp2p_log_level(config.libp2p_log_level)
    key_pair, peer_id = key_pair_from(private_key)
    stats = P2PStats()
    bans = BanList(clock=clock)
    if config.reachability is not None and config.reachability.hole_punch and (
            busy := unbindable_listen_addr(tuple(config.listen_addrs))):
        # Hole punching shares the listen port (SO_REUSEPORT), so the kernel would let a second
        # node bind a busy port: refuse it here, before listening.
        raise P2PError(f"cannot listen on {busy[0]}: {busy[1]}")
    # The guard admits peers during the handshake of the libp2p host built on it, and evicts
    # idle ones for newcomers: the host that disconnects those reads them from this queue.
    evict, evictions = trio.open_memory_channel[str](math.inf)
    guard = InboundGuard(config.conn_limits, clock, evictions=evict, heard=heard)
    host = build_host(key_pair, config, functools.partial(count_refusal, stats), bans, guard)
    refused = Refusals()  # addresses peers told us that were out of scope, by (via, reason)
    guard_observed_addrs(host, refused)
    relay = (RelayLayer(host, config.reachability, config.dial_timeout, clock, refused,
                        spoke=guard.heard_from)
             if config.reachability is not None else None)
    pubsub, router = build_pubsub(host, config, clock, stats)
    guard_gossip_px(router, refused)
    discovery = Discovery(host, config) if config.enable_dht else None
    body_error: list[BaseException] = []
    try:
        async with host.run(listen_addrs=[multiaddr.Multiaddr(a) for a in config.listen_addrs]):
            try:
                await stop_auto_connector(host)
                async with AsyncExitStack() as services:
                    await services.enter_async_context(background_trio_service(pubsub))
                    await services.enter_async_context(background_trio_service(router))
                    if discovery is not None:
                        await services.enter_async_context(background_trio_service(discovery.dht))
                    for service in relay.services() if relay is not None else ():
                        await services.enter_async_context(background_trio_service(service))
                    nursery = await services.enter_async_context(trio.open_nursery())
                    if relay is not None:
                        relay.attach(nursery)
                    p2p = P2PHost(
                        host=host,
                        pubsub=pubsub,
                        router=router,
                        discovery=discovery,
                        config=config,
                        peer_id=peer_id,
                        stats=stats,
                        nursery=nursery,
                        bans=bans,
                        relay=relay,
                        guard=guard,
                        evictions=evictions,
                        clock=clock,
                        addr_refused=refused,
                        scoring=scoring,
                    )
                    host.get_network().register_notifee(
                        ConnectionNotifee(p2p._on_connected, p2p._on_disconnected)
                    )
                    try:
                        yield p2p
                    except BaseException as exc:
                        body_error.append(exc)
                        raise
                    finally:
                        p2p._close_channels()
                        nursery.cancel_scope.cancel()
                        # The host closes before the pubsub/DHT services stop: the other
                        # order leaves their streams to a network that is going away.
                        await close_host(host)
            finally:
                await close_host(host)
    except BaseExceptionGroup as group:
        # The body's own exception comes back wrapped once per nursery between it and the
        # caller (five of them, mostly libp2p's): hand it back as raised.
        if body_error and leaf_exceptions(group) == body_error:
            raise body_error[0] from None
        raise
    finally:
        # A daemon thread per Pubsub sweeps its seen-messages cache; nothing else stops it.
        pubsub.seen_messages.stop()
