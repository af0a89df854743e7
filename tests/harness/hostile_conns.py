"""Hostile connection patterns against a node's connection slots: churn (connect, upgrade,
drop) from one identity, and many identities that connect and then say nothing.

Each connection is a real TCP + Noise + Yamux connection made with py-libp2p's own transport
and upgrader, without a host around it: one identity can churn quickly, and hundreds of
identities can hold connections from one test process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import multiaddr
import trio
from libp2p.abc import IMuxedConn
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.host.ping import ID as PING_PROTOCOL_ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.protocol_muxer.multiselect_client import MultiselectClient
from libp2p.protocol_muxer.multiselect_communicator import MultiselectCommunicator
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.transport.tcp.tcp import TCP
from libp2p.transport.upgrader import TransportUpgrader

__all__ = ["Identity", "churn", "churn_counts", "hold_idle"]


class Identity:
    """A libp2p identity (fresh Ed25519 key) that can open bare connections."""

    def __init__(self) -> None:
        key_pair = create_new_key_pair()
        noise = NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)
        self.upgrader = TransportUpgrader({TProtocol(NOISE_PROTOCOL_ID): noise},
                                          {TProtocol(YAMUX_PROTOCOL_ID): Yamux})
        self.tcp = TCP()

    @asynccontextmanager
    async def connection(self, target: str, *, ping: bool = False) -> AsyncIterator[IMuxedConn]:
        """A fully upgraded connection to ``target``, yielded once the node has registered it;
        dropped (socket closed, no goodbye) on exit.

        Registered means: it answered one libp2p ping (``ping``), or it opened its first
        stream to us (which we never answer: an idle peer).
        """
        info = info_from_p2p_addr(multiaddr.Multiaddr(target))
        raw = await self.tcp.dial(info.addrs[0])
        try:
            secured = await self.upgrader.upgrade_security(raw, True, info.peer_id)
            muxed = await self.upgrader.upgrade_connection(secured, info.peer_id)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(muxed.start)
                if ping:
                    await _ping(muxed)
                else:
                    await muxed.accept_stream()
                yield muxed
                nursery.cancel_scope.cancel()
        finally:
            with contextlib.suppress(Exception):
                await raw.close()


async def _ping(muxed: IMuxedConn) -> None:
    """One round of libp2p's ping protocol on a new stream."""
    stream = await muxed.open_stream()
    await MultiselectClient().select_one_of([PING_PROTOCOL_ID],
                                            MultiselectCommunicator(stream))
    payload = os.urandom(32)
    await stream.write(payload)
    echo = b""
    while len(echo) < len(payload):
        echo += await stream.read(len(payload) - len(echo))
    if echo != payload:
        raise ConnectionError("ping answered with other bytes")


async def churn(target: str, cycles: int, parallel: int = 1) -> int:
    """``cycles`` connections from one identity, each upgraded then dropped; returns how many
    completed the upgrade (the rest were refused or failed)."""
    return (await churn_counts(target, cycles, parallel))[1]


async def churn_counts(target: str, cycles: int, parallel: int = 1) -> tuple[int, int]:
    """:func:`churn`, returning (cycles attempted, cycles that completed the upgrade)."""
    identity = Identity()
    attempted = done = 0

    async def worker(count: int) -> None:
        nonlocal attempted, done
        for _ in range(count):
            attempted += 1
            with contextlib.suppress(Exception), trio.fail_after(10):
                async with identity.connection(target, ping=True):
                    done += 1

    async with trio.open_nursery() as nursery:
        for i in range(parallel):
            nursery.start_soon(worker, cycles // parallel + (i < cycles % parallel))
    return attempted, done


@asynccontextmanager
async def hold_idle(target: str, identities: int) -> AsyncIterator[list[bool]]:
    """``identities`` fresh identities, each holding one connection to ``target`` and never
    opening a stream. Yields a list whose item i is True while connection i is open (the node
    may close it: then it turns False)."""
    alive = [False] * identities

    async def one(i: int, ready: trio.Event) -> None:
        try:
            async with Identity().connection(target) as muxed:
                alive[i] = True
                ready.set()
                await muxed.event_closed.wait()  # type: ignore[attr-defined]
        except Exception:
            pass
        finally:
            alive[i] = False
            ready.set()

    async with trio.open_nursery() as nursery:
        for i in range(identities):
            ready = trio.Event()
            nursery.start_soon(one, i, ready)
            with trio.move_on_after(10):
                await ready.wait()
        yield alive
        nursery.cancel_scope.cancel()
