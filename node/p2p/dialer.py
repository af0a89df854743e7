"""Dialing a peer: the checks before a dial (ourselves, ``allowed_peers``, bans), a direct
dial at exactly the given address, a relayed one through the relay layer, and the ``verify``
probe of an address when the peer is connected already."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from node.p2p.addrs import dial_fresh, dial_target, probe
from node.p2p.frames import DialError, PeerRefusedError
from node.p2p.types import BanList, ConnectedPeer, P2PConfig, P2PStats

if TYPE_CHECKING:
    from libp2p.abc import IHost

    from node.p2p.relay import RelayLayer

__all__ = ["DialingHost", "check_dialable", "connect", "count_refusal"]


class DialingHost(Protocol):
    """What dialing reads of ``node.p2p.host.P2PHost`` (a Protocol, so that the host can
    import this module without an import cycle)."""

    config: P2PConfig
    peer_id: str
    stats: P2PStats
    bans: BanList
    relay: RelayLayer | None

    def peer_info(self, peer_id: str) -> ConnectedPeer | None: ...

logger = logging.getLogger("node.p2p")


async def connect(host: DialingHost, network: IHost, address: str, *, verify: bool = False
                  ) -> str:
    """Connect ``host`` (over ``network``, its libp2p host) to
    ``/ip4|ip6|dns4|dns6/.../tcp/.../p2p/<peer id>``; the peer id.

    ``verify``: when already connected to that peer, still dial ``address`` (a probe) so that
    a wrong or stale address is an error rather than a silent success.

    :raises PeerRefusedError: the peer is outside ``allowed_peers``, or banned.
    :raises DialError: bad address, unreachable, handshake failure, or ``dial_timeout``.
    """
    timeout = host.config.dial_timeout
    if "/p2p-circuit" in address:
        return await _connect_relayed(host, address)
    info, resolved = await dial_target(address, timeout)
    peer = info.peer_id.to_base58()
    check_dialable(host, peer, address)
    connected = host.peer_info(peer) is not None
    if connected and not verify:
        return peer
    try:
        if connected:  # a probe beside the connection we have
            await probe(network, resolved, peer, timeout)
        else:
            await dial_fresh(network, info, address, timeout)
    except DialError:
        host.stats.dial_failures += 1
        raise
    return peer


async def _connect_relayed(host: DialingHost, address: str) -> str:
    if host.relay is None:
        raise DialError(f"relayed addresses need [reachability] enabled: {address}")
    peer = address.rsplit("/p2p/", 1)[-1]
    check_dialable(host, peer, address)
    if host.peer_info(peer) is not None:
        return peer
    return await host.relay.dial_circuit(address, host.config.dial_timeout)


def check_dialable(host: DialingHost, peer: str, address: str) -> None:
    """Refuse to dial ourselves, a peer outside ``allowed_peers`` or a banned one."""
    if peer == host.peer_id:
        raise DialError(f"refusing to dial ourselves at {address}")
    allowed = host.config.allowed_peers
    if allowed is not None and peer not in allowed:
        count_refusal(host.stats, peer, "outbound", "not in allowed_peers")
        raise PeerRefusedError(f"peer {peer} is not in allowed_peers")
    if host.bans.is_banned(peer):
        count_refusal(host.stats, peer, "outbound", "banned")
        raise PeerRefusedError(f"peer {peer} is banned for misbehaviour")


def count_refusal(stats: P2PStats, peer: str, direction: str, reason: str) -> None:
    if reason == "banned":
        stats.refused_banned += 1
    else:
        stats.refused_connections += 1
    logger.warning("refused %s connection with %s: %s", direction, peer, reason)
