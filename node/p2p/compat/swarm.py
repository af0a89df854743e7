"""The swarm and the peerstore of py-libp2p 0.8.1: an inbound slot held for the swarm's life,
an expired peer entry that raises out of the record clean-up (entries S1, S2 of the table in
``node.p2p.compat``). Applied only by :func:`node.p2p.compat.apply`, after the version check.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import libp2p.network.swarm as _swarm_module
import libp2p.peer.peerstore as _peerstore_module
from libp2p.abc import IMuxedConn
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.peer.id import ID

from node.p2p.compat.version import require

__all__ = ["patch_expired_peer_records", "patch_inbound_slots"]

_logger = logging.getLogger("node.p2p")

_original_do_handle_inbound = getattr(_swarm_module.Swarm, "_do_handle_inbound_connection", None)


async def _serve_inbound_until_closed(
    self: _swarm_module.Swarm, read_write_closer: Any, maddr: Any, failure_event: Any
) -> None:
    """Upgrade one accepted TCP connection, then hold its inbound slot until it closes.

    py-libp2p 0.8.1 takes an inbound slot (``max_connections - min_connections``, 250 by
    default) per accepted connection and, after a successful upgrade, holds it until the
    *swarm* stops (``await self.manager.wait_finished()``), whatever becomes of the connection:
    after 250 connections in the life of the process every new inbound one is refused. Here
    the wait ends when that connection closes, so ``_handle_inbound_connection`` (unchanged)
    gives the slot back. Pre-muxed transports (QUIC), which we do not use, keep the original.
    """
    if isinstance(read_write_closer, IMuxedConn):
        original = _original_do_handle_inbound
        if original is not None:
            await original(self, read_write_closer, maddr, failure_event)
        return
    remote = self._build_remote_multiaddr(read_write_closer)
    if remote is not None and not await self.connection_gate.is_allowed(remote):
        with contextlib.suppress(Exception):
            await read_write_closer.close()
        return
    raw_conn = RawConnection(read_write_closer, False)
    try:
        muxed = await self.upgrade_inbound_raw_conn(raw_conn, maddr)
    except Exception as exc:
        _logger.debug("inbound connection from %s failed: %s", remote, exc)
        with contextlib.suppress(Exception):
            await raw_conn.close()
        return
    for conn in list(self.connections.get(muxed.peer_id, ())):
        if conn.muxed_conn is muxed:
            await conn.event_closed.wait()  # type: ignore[attr-defined]
            return
    # Not registered (add_conn refused it, or it closed already): nothing to wait for.


def patch_inbound_slots() -> None:
    swarm = _swarm_module.Swarm
    require(swarm, "_do_handle_inbound_connection", "_handle_inbound_connection",
            "_build_remote_multiaddr", "upgrade_inbound_raw_conn")
    setattr(swarm, "_do_handle_inbound_connection", _serve_inbound_until_closed)  # noqa: B010


def _drop_record_without_live_addrs(self: _peerstore_module.PeerStore, peer_id: ID) -> None:
    """Forget ``peer_id``'s signed peer record when it has no live address left.

    0.8.1 asks ``addrs(peer_id)``, which *raises* ``PeerStoreError('peer ID is expired')`` once
    the entry's TTL has passed, out of ``clear_addrs``, ``add_addrs`` and the peerstore's own
    cleanup. ``host.connect`` stores a peer's addresses with a 120-s TTL, and a record that
    keeps arriving unchanged is not consumed again (``_consume_record_once``), so two minutes
    after a connect the redial of a peer that left (``dial_fresh`` clears its addresses first)
    raised out of the dial loop and ended the daemon. An expired entry has no live address:
    its addresses are cleared (as ``addrs`` does) and the record dropped, never raised.
    """
    if peer_id not in self.peer_record_map:
        return
    data = self.peer_data_map.get(peer_id)
    if data is not None and data.is_expired():
        data.clear_addrs()
    if data is None or not data.get_addrs():
        self.peer_record_map.pop(peer_id, None)


def patch_expired_peer_records() -> None:
    store = _peerstore_module.PeerStore
    require(store, "maybe_delete_peer_record")
    setattr(store, "maybe_delete_peer_record", _drop_record_without_live_addrs)  # noqa: B010
