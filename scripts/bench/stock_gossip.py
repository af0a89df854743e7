"""Stock py-libp2p GossipSub, as shipped, for the benchmarks that compare our stack against it.

A process that uses this must never import ``node.p2p``: our compat package patches py-libp2p
for the whole process (``node.p2p.compat.apply``), and the stock figures would then be ours.
The router gets the arguments the node passes to its own (degree 6/4/12, history 4, spam,
adaptive and eclipse protection off): stock's default spam protection caps a topic at 10
messages/s, which would measure the cap, not GossipSub. No subclass, no patch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any


def dial_addr(host: Any) -> str:
    """A stock host's first listen address with its ``/p2p/`` part (what ``connect`` takes)."""
    addr = f"{host.get_addrs()[0]}"
    return addr if "/p2p/" in addr else f"{addr}/p2p/{host.get_id()}"


@dataclass
class StockGossip:
    """A running stock host with its Pubsub and GossipSub router."""

    host: Any  # libp2p.abc.IHost
    pubsub: Any  # libp2p.pubsub.pubsub.Pubsub
    router: Any  # libp2p.pubsub.gossipsub.GossipSub

    @property
    def addr(self) -> str:
        return dial_addr(self.host)

    async def connect(self, addr: str) -> None:
        import multiaddr
        from libp2p.peer.peerinfo import info_from_p2p_addr

        await self.host.connect(info_from_p2p_addr(multiaddr.Multiaddr(addr)))

    def mesh_size(self, topic: str) -> int:
        return len(self.router.mesh.get(topic, set()))


@asynccontextmanager
async def open_stock_gossip(listen: str,
                            protocols: Sequence[str] | None = None) -> AsyncIterator[StockGossip]:
    """``libp2p.new_host()`` with its defaults, a stock ``Pubsub`` and ``GossipSub``, running.
    ``protocols``: what the router offers, most preferred first (default: the node's, 1.1.0
    and 1.0.0; ``/meshsub/1.2.0`` first turns on 0.8.1's own IDONTWANT)."""
    import multiaddr
    from libp2p import new_host
    from libp2p.custom_types import TProtocol
    from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
    from libp2p.pubsub.pubsub import Pubsub
    from libp2p.tools.anyio_service import background_trio_service

    host = new_host()
    offered = ([PROTOCOL_ID_V11, PROTOCOL_ID] if protocols is None
               else [TProtocol(p) for p in protocols])
    router = GossipSub(
        protocols=offered, degree=6, degree_low=4, degree_high=12,
        heartbeat_interval=1, gossip_window=3, gossip_history=4, spam_protection_enabled=False,
        adaptive_gossip_enabled=False, eclipse_protection_enabled=False)
    pubsub = Pubsub(host, router)
    async with host.run(listen_addrs=[multiaddr.Multiaddr(listen)]), \
            background_trio_service(pubsub), background_trio_service(router):
        yield StockGossip(host, pubsub, router)
