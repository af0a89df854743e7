"""Address scope inside py-libp2p: what peers tell us about addresses is checked against the
address we reach them on (``sync.membership.scope``) before libp2p acts on it.

* identify's ``observed_addr`` (how a peer sees us) feeds libp2p's observed-address manager,
  hence the addresses we advertise and offer for hole punching: out-of-scope ones are dropped;
* GossipSub's peer exchange (peer records in a PRUNE) makes libp2p dial every address listed,
  whoever sent it: we never use it (``/syncnode/px`` is our peer exchange), so it is ignored;
* hole-punch dials (``node.p2p.relay``) go through :func:`punch_refusal`.

Each refusal is counted in a ``(via, reason)`` counter the host exports
(``peer_addrs_refused_total``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from typing import Any

from libp2p.abc import IHost, INetConn, INetwork
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub

from node.p2p.compat.scope import filter_observations, replace_gossip_px
from sync.membership.scope import addr_refusal, relay_of, source_ip

__all__ = ["Refusals", "conn_source_ip", "guard_gossip_px", "guard_observed_addrs",
           "punch_refusal"]

Refusals = Counter[tuple[str, str]]
logger = logging.getLogger("node.p2p")


def conn_source_ip(conn: INetConn, network: INetwork | None = None) -> str | None:
    """The IP we reach the peer of ``conn`` on; for a relayed connection (``network``
    given), that of our own connection to its relay."""
    try:
        addrs = conn.get_transport_addresses()
    except Exception:
        return None
    address = str(addrs[0]) if addrs else None
    relay = relay_of(address)
    if relay is not None and network is not None:
        with contextlib.suppress(Exception):
            for hop in network.get_connections(ID.from_base58(relay)):
                return conn_source_ip(hop)
    return source_ip(address)


def guard_observed_addrs(host: IHost, refused: Refusals) -> None:
    """Drop identify observations of our address that the observer is not in scope for."""
    def keep(conn: INetConn, observed: Any) -> bool:
        reason = addr_refusal(str(observed), conn_source_ip(conn))
        if reason is not None:
            refused["observed", reason] += 1
            logger.debug("ignored observed address %s: %s", observed, reason)
        return reason is None

    filter_observations(host, keep)


def guard_gossip_px(router: GossipSub, refused: Refusals) -> None:
    """Never dial the peers a PRUNE lists: count them instead."""
    async def ignore(px_peers: list[Any]) -> None:
        refused["gossip_px", "ignored"] += len(px_peers)

    replace_gossip_px(router, ignore)


def punch_refusal(host: IHost, peer_id: ID, addr: str) -> str | None:
    """Why a hole-punch dial of ``peer_id`` at ``addr`` must not happen (None: it may). The
    source is the connection we have to that peer: a relayed one counts as its relay's."""
    network = host.get_network()
    conns = list(network.get_connections(peer_id))
    return addr_refusal(addr, conn_source_ip(conns[0], network) if conns else None)
