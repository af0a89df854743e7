"""Two inputs peers give py-libp2p 0.8.1 about addresses, made checkable per host (entries A1,
A2 of the table in ``node.p2p.compat``; the checks themselves are ``node.p2p.scope_guard``'s).

* A1 ``BasicHost._observed_addr_manager.record_observation``: identify's ``observed_addr``
  (how a peer sees us) feeds the observed-address manager, hence the addresses we advertise
  and offer for hole punching, whoever said it: :func:`filter_observations` lets a predicate
  drop an observation first (set on the host's own manager: per host).
* A2 ``GossipSub._do_px``: peer exchange in a PRUNE makes libp2p dial every address listed,
  whoever sent it: :func:`replace_gossip_px` hands the list to our function instead (set on
  the router instance: per host).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from libp2p.abc import IHost, INetConn
from libp2p.pubsub.gossipsub import GossipSub

from node.p2p.compat.version import require

__all__ = ["filter_observations", "replace_gossip_px"]


def filter_observations(host: IHost, keep: Callable[[INetConn, Any], bool]) -> bool:
    """Record an identify observation of our address only when ``keep(conn, observed)``;
    False when the host has no observed-address manager (nothing to filter)."""
    manager: Any = getattr(host, "_observed_addr_manager", None)
    if manager is None:
        return False
    require(manager, "record_observation")
    record = manager.record_observation

    def checked(conn: INetConn, observed: Any, local_addrs: Any) -> None:
        if keep(conn, observed):
            record(conn, observed, local_addrs)

    manager.record_observation = checked
    return True


def replace_gossip_px(router: GossipSub,
                      handler: Callable[[list[Any]], Awaitable[None]]) -> None:
    """``router`` hands the peers a PRUNE lists to ``handler`` instead of dialling them."""
    require(router, "_do_px")
    router._do_px = handler  # type: ignore[method-assign,assignment]
