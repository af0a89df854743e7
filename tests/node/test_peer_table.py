"""Who is connected (node.p2p.peer_table) against real py-libp2p hosts on 127.0.0.1.

A clean-clone CI run failed because a ``peers forget`` did not disconnect: the peer stayed in
``/v1/peers`` with nothing logged on either side. Two ways there, both reproduced here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from libp2p.peer.id import ID

from node.api import register_p2p_metrics
from node.clock import SystemClock
from node.p2p import DialError, P2PConfig, P2PHost, PeerEvent
from node.p2p.run import open_host
from node.telemetry.metrics import Metrics
from tests.harness.cluster import until

pytestmark = pytest.mark.trio


@asynccontextmanager
async def _two_hosts() -> AsyncIterator[tuple[P2PHost, P2PHost]]:
    config = P2PConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",))
    async with AsyncExitStack() as stack:
        a, b = [await stack.enter_async_context(
            open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()))
            for _ in range(2)]
        yield a, b


class _Events:
    """The peer events a host sends from now on, read without waiting."""

    def __init__(self, host: P2PHost) -> None:
        self._channel = host.peer_events()
        self._seen: list[PeerEvent] = []

    def of(self, peer: str) -> list[str]:
        while True:
            try:
                self._seen.append(self._channel.receive_nowait())
            except trio.WouldBlock:
                return [event.kind for event in self._seen if event.peer_id == peer]


async def test_a_connection_closed_without_libp2ps_notice_does_not_hold_its_peer() -> None:
    # libp2p 0.8.1 sends "disconnected" after a 0.1 s pause in its close: a close
    # cancelled there (a timeout around it) ends the connection and never tells anyone. The
    # table counted notices, so the peer stayed "connected" for good, and a later
    # ``disconnect`` found no connection to close and changed nothing.
    async with _two_hosts() as (a, b):
        seen = _Events(a)
        await a.connect(b.listen_addrs[0])
        await until(lambda: b.peer_id in a.connected_peers(), 10, "not connected")
        [conn] = a.libp2p_host.get_network().get_connections(ID.from_base58(b.peer_id))
        with trio.move_on_after(0.05):
            await conn.close()  # cut short inside libp2p's close, before its notice
        assert conn.is_closed
        await a.disconnect(b.peer_id)
        assert b.peer_id not in a.connected_peers()
        # Counted, and served under this name on /metrics.
        metrics = Metrics()
        register_p2p_metrics(metrics, a)
        assert "syncnode_p2p_connections_unnoticed_total 1.0" in metrics.render()
        assert seen.of(b.peer_id) == ["connected", "disconnected"]
        # A new connection is a new "connected", as after any disconnect.
        await a.connect(b.listen_addrs[0])
        await until(lambda: b.peer_id in a.connected_peers(), 10, "not connected again")
        assert seen.of(b.peer_id) == ["connected", "disconnected", "connected"]


async def test_the_housekeeping_sweep_lets_go_of_a_peer_closed_without_notice() -> None:
    async with _two_hosts() as (a, b):
        await a.connect(b.listen_addrs[0])
        await until(lambda: b.peer_id in a.connected_peers(), 10, "not connected")
        [conn] = a.libp2p_host.get_network().get_connections(ID.from_base58(b.peer_id))
        with trio.move_on_after(0.05):
            await conn.close()
        assert b.peer_id in a.connected_peers()  # no notice came
        a.sweep_connections()
        assert b.peer_id not in a.connected_peers()
        assert a.stats.connections_unnoticed == 1


async def test_a_dial_in_flight_when_its_peer_is_forgotten_does_not_reconnect_it() -> None:
    # The other way there: membership's redial of the peer was in flight when ``forget``
    # disconnected it, completed just after, and the peer was connected again (and its
    # address learnt back into the address book).
    async with _two_hosts() as (a, b):
        seen = _Events(a)
        failures: list[Exception] = []

        async def dial() -> None:
            try:
                await a.connect(b.listen_addrs[0])
            except DialError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(dial)
            # Two scheduler passes: the dial has begun (whichever order trio ran the first
            # pass in) and waits on its socket; its handshake needs many more.
            await trio.lowlevel.checkpoint()
            await trio.lowlevel.checkpoint()
            await a.forget(b.peer_id)
        assert failures and "forgotten" in str(failures[0])
        await until(lambda: a.peer_id not in b.connected_peers(), 10,
                    "the forgotten peer still holds the dial's connection")
        assert b.peer_id not in a.connected_peers()
        assert seen.of(b.peer_id) == []
        assert not a.libp2p_host.get_network().get_connections(ID.from_base58(b.peer_id))
        # A dial that begins after the forget is the user's own: it connects.
        await a.connect(b.listen_addrs[0])
        await until(lambda: b.peer_id in a.connected_peers(), 10, "not connected after")
