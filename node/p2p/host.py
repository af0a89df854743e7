"""The p2p layer of syncnode: a hardened wrapper around py-libp2p 0.8.1.

Only ``node/p2p*.py`` import libp2p. Everything above (the daemon) sees peer ids as ``str``,
payloads as ``bytes``, trio channels, and the errors of :mod:`node.p2p.frames`.

Usage::

    async with open_host(key, P2PConfig()) as host:
        host.set_stream_handler("/syncnode/recon/1.0.0", handle)
        peer = await host.connect("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooW...")
        async with await host.open_stream(peer, "/syncnode/recon/1.0.0") as stream:
            await stream.send(b"hello")
            reply = await stream.receive()
        messages = await host.subscribe("channel-a")
        await host.publish("channel-a", b"event")

Design notes, wire formats and measured figures: docs/p2p.md.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import TypeVar

import multiaddr
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.abc import IHost, INetConn, INetStream, ISubscriptionAPI
from libp2p.custom_types import TProtocol
from libp2p.host.ping import ID as PING_PROTOCOL_ID
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service

from node.p2p.addrs import probe, resolve_dns
from node.p2p.dht import Discovery, rendezvous_key
from node.p2p.frames import (
    DialError,
    FramedStream,
    FrameError,
    P2PError,
    P2PTimeoutError,
    PeerRefusedError,
    StreamClosedError,
    StreamOpenError,
)
from node.p2p.setup import (
    ConnectionNotifee,
    build_host,
    build_pubsub,
    check_libp2p_version,
    close_host,
    connection_direction,
    key_pair_from,
    remote_address,
    stop_auto_connector,
    tame_libp2p_logging,
)
from node.p2p.types import (
    BanList,
    ConnectedPeer,
    GossipMessage,
    P2PConfig,
    P2PStats,
    PeerEvent,
)

__all__ = [
    "BanList",
    "ConnectedPeer",
    "DialError",
    "FrameError",
    "FramedStream",
    "GossipMessage",
    "P2PConfig",
    "P2PError",
    "P2PHost",
    "P2PStats",
    "P2PTimeoutError",
    "PeerEvent",
    "PeerRefusedError",
    "StreamClosedError",
    "StreamHandler",
    "StreamOpenError",
    "open_host",
    "rendezvous_key",
]

logger = logging.getLogger("node.p2p")

StreamHandler = Callable[[FramedStream], Awaitable[None]]
_T = TypeVar("_T")
_PING_BYTES = 32
_MAX_FORWARDERS = 10_000


class P2PHost:
    """A running libp2p host. Obtain one from :func:`open_host`; do not construct directly."""

    def __init__(
        self,
        *,
        host: IHost,
        pubsub: Pubsub,
        router: GossipSub,
        discovery: Discovery | None,
        config: P2PConfig,
        peer_id: str,
        stats: P2PStats,
        nursery: trio.Nursery,
        bans: BanList | None = None,
    ) -> None:
        self._host = host
        self._pubsub = pubsub
        self._router = router
        self._discovery = discovery
        self.config = config
        self.peer_id = peer_id
        self.stats = stats
        self.bans = bans if bans is not None else BanList()
        self._nursery = nursery
        self._peers: dict[str, ConnectedPeer] = {}
        self._conn_count: dict[str, int] = {}
        self._event_sinks: list[trio.MemorySendChannel[PeerEvent]] = []
        self._topic_sinks: dict[str, list[trio.MemorySendChannel[GossipMessage]]] = {}
        # Seeded per host: with one seed for all, every node would drop the same positions of
        # its incoming stream (and seed 0 happens to drop none of the first 25 at 20%).
        self._drop_rng = random.Random(f"{config.drop_seed}/{peer_id}")
        self._closing = False
        # Bytes held in each subscriber queue (keyed by the send channel's id).
        self._queued: dict[int, collections.deque[int]] = {}
        self._queued_bytes: dict[int, int] = {}
        # (from, seqno) -> the neighbour that forwarded it, noted by the topic validator.
        self._forwarders: dict[tuple[bytes, bytes], str] = {}

    # -- addresses and connections --------------------------------------------------------

    @property
    def listen_addrs(self) -> list[str]:
        """Full multiaddrs we listen on, with actual bound ports and ``/p2p/<peer id>``."""
        return [str(a) for a in self._host.get_addrs()]

    async def connect(self, address: str, *, verify: bool = False) -> str:
        """Connect to ``/ip4|ip6|dns4|dns6/.../tcp/.../p2p/<peer id>``; returns the peer id.

        ``verify``: when already connected to that peer, still dial ``address`` (a probe) so
        that a wrong or stale address is an error rather than a silent success.

        :raises PeerRefusedError: the peer is outside ``allowed_peers``.
        :raises DialError: bad address, unreachable, handshake failure, or ``dial_timeout``.
        """
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(address))
        except Exception as exc:
            raise DialError(f"not a dialable /p2p multiaddr: {address!r} ({exc})") from exc
        try:
            with trio.fail_after(self.config.dial_timeout):
                resolved = await resolve_dns(address)
        except trio.TooSlowError:
            raise DialError(f"resolving {address} timed out") from None
        if resolved != address:
            info = info_from_p2p_addr(multiaddr.Multiaddr(resolved))
        peer = info.peer_id.to_base58()
        if peer == self.peer_id:
            raise DialError(f"refusing to dial ourselves at {address}")
        allowed = self.config.allowed_peers
        if allowed is not None and peer not in allowed:
            _count_refusal(self.stats, peer, "outbound", "not in allowed_peers")
            raise PeerRefusedError(f"peer {peer} is not in allowed_peers")
        if self.bans.is_banned(peer):
            _count_refusal(self.stats, peer, "outbound", "banned")
            raise PeerRefusedError(f"peer {peer} is banned for misbehaviour")
        if peer in self._peers:
            if verify:
                try:
                    await probe(self._host, resolved, peer, self.config.dial_timeout)
                except DialError:
                    self.stats.dial_failures += 1
                    raise
            return peer
        # libp2p remembers failed peers for 60 s and refuses to redial them; the daemon runs
        # its own back-off, so an explicit connect always gets a real attempt.
        unblock = getattr(self._host.get_network(), "unblock_peer", None)
        if unblock is not None:
            unblock(info.peer_id)
        # Dial exactly the address we were given: a stale one left in the peerstore by an
        # earlier run of that peer (it restarted on a new port) makes the whole dial fail.
        self._host.get_peerstore().clear_addrs(info.peer_id)
        try:
            with trio.fail_after(self.config.dial_timeout):
                await self._host.connect(info)
        except trio.TooSlowError as exc:
            self.stats.dial_failures += 1
            raise DialError(
                f"dial to {address} timed out after {self.config.dial_timeout}s"
            ) from exc
        except Exception as exc:
            self.stats.dial_failures += 1
            raise DialError(
                f"dial to {address} failed: {exc} (if the peer runs a closed group, it may not "
                "admit our peer id)"
            ) from exc
        if not self._host.get_network().get_connections(info.peer_id):
            self.stats.dial_failures += 1
            raise DialError(f"connection to {peer} closed right after it opened (refused?)")
        return peer

    def ban(self, peer_id: str, seconds: float) -> None:
        """Refuse ``peer_id`` (connections both ways, inbound streams) for ``seconds`` and drop
        its current connection."""
        self.bans.ban(peer_id, time.monotonic() + seconds)
        if peer_id in self._peers and not self._closing:
            self._nursery.start_soon(self.disconnect, peer_id)

    def is_banned(self, peer_id: str) -> bool:
        return self.bans.is_banned(peer_id)

    async def disconnect(self, peer_id: str) -> None:
        """Close every connection to ``peer_id`` (no error if there is none)."""
        try:
            await self._host.disconnect(ID.from_base58(peer_id))
        except Exception:
            logger.debug("disconnect from %s failed", peer_id, exc_info=True)

    def connected_peers(self) -> list[str]:
        return sorted(self._peers)

    def peer_info(self, peer_id: str) -> ConnectedPeer | None:
        return self._peers.get(peer_id)

    def peers(self) -> list[ConnectedPeer]:
        return [self._peers[p] for p in sorted(self._peers)]

    def peer_events(self) -> trio.MemoryReceiveChannel[PeerEvent]:
        """A new channel of connect/disconnect events from now on (one per listener).

        If the listener falls ``peer_event_queue_size`` events behind, further events are
        dropped and counted in ``stats.peer_events_dropped``. Closed when the host stops.
        """
        send, receive = trio.open_memory_channel[PeerEvent](self.config.peer_event_queue_size)
        self._event_sinks.append(send)
        return receive

    async def ping(self, peer_id: str) -> float:
        """Round-trip time to a connected peer with libp2p's ping protocol, in seconds."""
        payload = os.urandom(_PING_BYTES)
        stream = await self._open_raw(peer_id, PING_PROTOCOL_ID)
        try:
            with trio.fail_after(self.config.stream_open_timeout):
                start = trio.current_time()
                await stream.write(payload)
                echoed = b""
                while len(echoed) < _PING_BYTES:
                    chunk = await stream.read(_PING_BYTES - len(echoed))
                    if not chunk:
                        raise P2PError(f"ping stream to {peer_id} closed early")
                    echoed += chunk
                rtt = trio.current_time() - start
        except trio.TooSlowError as exc:
            raise P2PTimeoutError(f"ping to {peer_id} timed out") from exc
        except P2PError:
            raise
        except Exception as exc:
            raise P2PError(f"ping to {peer_id} failed: {exc!r}") from exc
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:
                    await stream.close()
                except Exception:
                    logger.debug("closing ping stream failed", exc_info=True)
        if echoed != payload:
            raise P2PError(f"ping reply from {peer_id} does not match")
        if peer_id in self._peers:
            self._peers[peer_id] = replace(self._peers[peer_id], latency_s=rtt)
        return rtt

    # -- streams --------------------------------------------------------------------------

    def set_stream_handler(self, protocol_id: str, handler: StreamHandler) -> None:
        """Serve ``protocol_id``: each inbound stream runs ``handler(FramedStream)``.

        The stream is closed when the handler returns and reset if it raises. An exception is
        logged and counted in ``stats.handler_errors``; it never reaches libp2p or the host.
        """

        async def run_handler(raw: INetStream) -> None:
            framed = self._wrap(raw, protocol_id)
            if self.bans.is_banned(framed.peer_id):
                # The stream raced the disconnect that came with the ban.
                self.stats.refused_banned += 1
                await framed.reset()
                return
            self.stats.streams_accepted += 1
            completed = False
            try:
                await handler(framed)
                completed = True
            except FrameError as exc:  # already counted in frame_errors; the peer's fault
                self.stats.handler_errors += 1
                logger.warning("handler %s: %s", protocol_id, exc)
            except P2PError as exc:  # timeouts, resets: ordinary network weather
                self.stats.handler_errors += 1
                logger.info("handler %s for %s ended: %s", protocol_id, framed.peer_id, exc)
            except Exception:  # a bug in the handler: loud, but the host keeps serving
                self.stats.handler_errors += 1
                logger.exception("handler %s for %s raised", protocol_id, framed.peer_id)
            finally:
                # Also on cancellation: the stream slot is released on every path.
                if completed:
                    await framed.close()
                else:
                    await framed.reset()

        self._host.set_stream_handler(TProtocol(protocol_id), run_handler)

    def remove_stream_handler(self, protocol_id: str) -> None:
        self._host.remove_stream_handler(TProtocol(protocol_id))

    async def open_stream(self, peer_id: str, protocol_id: str) -> FramedStream:
        """Open a framed stream to a connected peer; use it with ``async with``.

        :raises StreamOpenError: not connected, protocol refused, or ``stream_open_timeout``.
        """
        raw = await self._open_raw(peer_id, TProtocol(protocol_id))
        self.stats.streams_opened += 1
        return self._wrap(raw, protocol_id)

    async def _open_raw(self, peer_id: str, protocol_id: TProtocol) -> INetStream:
        if peer_id not in self._peers:
            self.stats.stream_open_failures += 1
            raise StreamOpenError(f"not connected to {peer_id}")
        try:
            with trio.fail_after(self.config.stream_open_timeout):
                return await self._host.new_stream(ID.from_base58(peer_id), [protocol_id])
        except trio.TooSlowError as exc:
            self.stats.stream_open_failures += 1
            raise StreamOpenError(
                f"opening {protocol_id} to {peer_id} timed out after "
                f"{self.config.stream_open_timeout}s"
            ) from exc
        except Exception as exc:
            self.stats.stream_open_failures += 1
            raise StreamOpenError(f"opening {protocol_id} to {peer_id} failed: {exc}") from exc

    def _wrap(self, raw: INetStream, protocol_id: str) -> FramedStream:
        def count_frame_error() -> None:
            self.stats.frame_errors += 1

        def count_timeout() -> None:
            self.stats.timeouts += 1

        return FramedStream(
            raw,
            peer_id=raw.muxed_conn.peer_id.to_base58(),
            protocol_id=protocol_id,
            max_frame_bytes=self.config.max_frame_bytes,
            read_timeout=self.config.read_timeout,
            write_timeout=self.config.write_timeout,
            on_frame_error=count_frame_error,
            on_timeout=count_timeout,
        )

    # -- gossipsub ------------------------------------------------------------------------

    async def subscribe(self, topic: str) -> trio.MemoryReceiveChannel[GossipMessage]:
        """A new channel receiving every message on ``topic`` (one channel per call).

        Messages are moved from libp2p's subscription into this channel as they arrive; if a
        consumer falls ``gossip_queue_size`` messages behind, the overflow is dropped and
        counted in ``stats.gossip_dropped_overflow``. Closed when the host stops or on
        :meth:`unsubscribe`.
        """
        send, receive = trio.open_memory_channel[GossipMessage](self.config.gossip_queue_size)
        sinks = self._topic_sinks.get(topic)
        if sinks is None:
            sinks = self._topic_sinks[topic] = []
            # Outsiders of a closed group are rejected before delivery *and* before relaying,
            # so members never spread them; the forwarder of every message is noted.
            self._pubsub.set_topic_validator(topic, self._from_member, False)
            subscription = await self._pubsub.subscribe(topic)
            self._nursery.start_soon(self._drain, topic, subscription)
        sinks.append(send)
        return receive

    async def unsubscribe(self, topic: str) -> None:
        """Leave ``topic`` and close every channel :meth:`subscribe` returned for it."""
        sinks = self._topic_sinks.pop(topic, None)
        if sinks is None:
            return
        for sink in sinks:
            sink.close()
        await self._pubsub.unsubscribe(topic)

    async def publish(self, topic: str, data: bytes) -> None:
        """Sign and broadcast ``data`` on ``topic`` (need not be subscribed)."""
        if len(data) > self.config.gossip_max_message_bytes:
            raise P2PError(
                f"gossip message of {len(data)} bytes exceeds gossip_max_message_bytes="
                f"{self.config.gossip_max_message_bytes}"
            )
        await self._pubsub.publish(topic, bytes(data))
        self.stats.gossip_published += 1

    def _from_member(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        if len(self._forwarders) >= _MAX_FORWARDERS:
            del self._forwarders[next(iter(self._forwarders))]
        self._forwarders[(msg.from_id, msg.seqno)] = forwarder.to_base58()
        allowed = self.config.allowed_peers
        if allowed is None:
            return True
        origin = ID(msg.from_id).to_base58()
        if allowed is None or origin == self.peer_id or origin in allowed:
            return True
        self.stats.gossip_refused_foreign += 1
        logger.warning("dropped gossip from %s (not in allowed_peers), via %s", origin, forwarder)
        return False

    def gossip_peers(self, topic: str) -> list[str]:
        """Connected peers known to be subscribed to ``topic``."""
        return sorted(p.to_base58() for p in self._pubsub.peer_topics.get(topic, ()))

    def mesh_peers(self, topic: str) -> list[str]:
        """Peers in our GossipSub mesh for ``topic`` (they get full messages, not gossip)."""
        return sorted(p.to_base58() for p in self._router.mesh.get(topic, ()))

    async def _drain(self, topic: str, source: ISubscriptionAPI) -> None:
        async for msg in source:
            try:
                self._deliver(topic, msg)
            except Exception:  # one odd message must not take the host's nursery down
                logger.exception("delivering a gossip message on %s failed", topic)

    def _deliver(self, topic: str, msg: rpc_pb2.Message) -> None:
        forwarder = self._forwarders.pop((msg.from_id, msg.seqno), None)
        from_peer = ID(msg.from_id).to_base58()
        if from_peer == self.peer_id and not self.config.deliver_own_messages:
            return
        fraction = self.config.drop_incoming_gossip_fraction
        if fraction and self._drop_rng.random() < fraction:
            self.stats.gossip_dropped_test += 1
            return
        item = GossipMessage(
            topic=topic,
            from_peer=from_peer,
            data=bytes(msg.data),
            seqno=int.from_bytes(msg.seqno, "big"),
            forwarder=forwarder,
        )
        self.stats.gossip_received += 1
        sinks = self._topic_sinks.get(topic, [])
        if not self._queue_room(sinks, len(item.data)):
            self.stats.gossip_dropped_overflow += 1
            return
        self._fan_out(sinks, item, "gossip_dropped_overflow")

    def _queue_room(self, sinks: list[trio.MemorySendChannel[GossipMessage]], size: int) -> bool:
        """Whether every subscriber queue has room for ``size`` more bytes; if so, count them.

        The queue sizes of the items each sink holds are kept in order; whatever the consumer
        took since (the channel's buffer shrank) is popped from the front.
        """
        for sink in sinks:
            sizes = self._queued.setdefault(id(sink), collections.deque())
            held = sink.statistics().current_buffer_used
            while len(sizes) > held:
                self._queued_bytes[id(sink)] = self._queued_bytes.get(id(sink), 0) - sizes.popleft()
            if self._queued_bytes.get(id(sink), 0) + size > self.config.gossip_queue_bytes:
                return False
        for sink in sinks:
            self._queued[id(sink)].append(size)
            self._queued_bytes[id(sink)] = self._queued_bytes.get(id(sink), 0) + size
        return True

    def _fan_out(self, sinks: list[trio.MemorySendChannel[_T]], item: _T, counter: str) -> None:
        for sink in list(sinks):
            try:
                sink.send_nowait(item)
            except trio.WouldBlock:
                setattr(self.stats, counter, getattr(self.stats, counter) + 1)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                sinks.remove(sink)

    # -- DHT discovery (config.enable_dht) ------------------------------------------------

    async def advertise(self, rendezvous: str) -> bool:
        """Put a provider record "we serve ``rendezvous``" into the DHT; re-run periodically.

        :returns: whether at least one peer stored the record.
        :raises P2PError: the DHT is disabled; :class:`P2PTimeoutError` after ``dht_timeout``.
        """
        return await self._dht().advertise(rendezvous)

    async def find_peers(self, rendezvous: str, count: int = 20) -> dict[str, list[str]]:
        """Peers that advertised ``rendezvous``: peer id -> dialable ``/p2p/`` multiaddrs."""
        return await self._dht().find(rendezvous, count)

    def _dht(self) -> Discovery:
        if self._discovery is None:
            raise P2PError("DHT discovery is disabled (P2PConfig.enable_dht=False)")
        return self._discovery

    # -- connection bookkeeping (called from the libp2p notifee) --------------------------

    def _on_connected(self, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id.to_base58()
        self.stats.connections_opened += 1
        count = self._conn_count.get(peer, 0) + 1
        self._conn_count[peer] = count
        if count > 1 or self._closing:
            return
        address = remote_address(conn)
        direction = connection_direction(conn)
        self._peers[peer] = ConnectedPeer(
            peer_id=peer, address=address, direction=direction, connected_since=time.time()
        )
        logger.info("connected to %s (%s, %s)", peer, direction, address)
        self._fan_out(
            self._event_sinks,
            PeerEvent("connected", peer, address=address, direction=direction),
            "peer_events_dropped",
        )
        if self.config.ping_on_connect:
            self._nursery.start_soon(self._measure_latency, peer)
        if self._discovery is not None:
            self._nursery.start_soon(self._discovery.add_peer, peer)

    def _on_disconnected(self, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id.to_base58()
        self.stats.connections_closed += 1
        count = self._conn_count.get(peer, 0) - 1
        if count > 0:
            self._conn_count[peer] = count
            return
        self._conn_count.pop(peer, None)
        if self._peers.pop(peer, None) is None:
            return
        logger.info("disconnected from %s", peer)
        self._fan_out(self._event_sinks, PeerEvent("disconnected", peer), "peer_events_dropped")

    async def _measure_latency(self, peer: str) -> None:
        try:
            await self.ping(peer)
        except Exception as exc:  # best effort: latency stays None
            logger.debug("latency probe to %s failed: %s", peer, exc)

    def _close_channels(self) -> None:
        self._closing = True
        for sink in self._event_sinks:
            sink.close()
        for topic_sinks in self._topic_sinks.values():
            for topic_sink in topic_sinks:
                topic_sink.close()
        self._event_sinks.clear()


@asynccontextmanager
async def open_host(
    private_key: Ed25519PrivateKey, config: P2PConfig | None = None
) -> AsyncIterator[P2PHost]:
    """Start a host with ``private_key``'s identity; stop it, releasing every socket, on exit.

    The host's background tasks run in a nursery owned by this context manager.
    """
    config = config or P2PConfig()
    check_libp2p_version()
    tame_libp2p_logging(config.libp2p_log_level)
    key_pair, peer_id = key_pair_from(private_key)
    stats = P2PStats()
    bans = BanList()
    host = build_host(key_pair, config, functools.partial(_count_refusal, stats), bans)
    pubsub, router = build_pubsub(host, config)
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
                    nursery = await services.enter_async_context(trio.open_nursery())
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
        if body_error and _leaves(group) == body_error:
            raise body_error[0] from None
        raise
    finally:
        # A daemon thread per Pubsub sweeps its seen-messages cache; nothing else stops it.
        pubsub.seen_messages.stop()


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _count_refusal(stats: P2PStats, peer: str, direction: str, reason: str) -> None:
    if reason == "banned":
        stats.refused_banned += 1
    else:
        stats.refused_connections += 1
    logger.warning("refused %s connection with %s: %s", direction, peer, reason)
