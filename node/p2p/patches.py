"""Our changes to py-libp2p 0.8.1 internals, each under a version check.

Every patch here replaces a module-level name libp2p looks up at call time; the names and
defaults change between releases, so :func:`check_libp2p_version` refuses any other version
(docs/p2p.md, section 4 "GossipSub configuration and library patches").
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
from typing import Any

import libp2p
import libp2p.network.connection.swarm_connection as _swarm_connection_module
import libp2p.network.swarm as _swarm_module
import libp2p.peer.peerstore as _peerstore_module
import libp2p.pubsub.gossipsub as _gossipsub_module
import libp2p.pubsub.pubsub as _pubsub_module
from libp2p.abc import IHost, IMuxedConn
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.peer.id import ID
from libp2p.pubsub.rpc_queue import DefaultMaxMessageSize, RpcQueue
from libp2p.pubsub.utils import maybe_consume_signed_record as _original_consume_record

from node.p2p.frames import P2PError

__all__ = [
    "SUPPORTED_LIBP2P_VERSION",
    "check_libp2p_version",
    "patch_expired_peer_records",
    "patch_gossip_queues",
    "patch_inbound_slots",
    "patch_record_verification",
    "tame_libp2p_logging",
]

SUPPORTED_LIBP2P_VERSION = "0.8.1"
_logger = logging.getLogger("node.p2p")
# libp2p's own subscription channel only feeds our drain task, which never blocks, so it can be
# generous; drops are then visible only in our own bounded queues, where they are counted.
_LIBP2P_SUBSCRIPTION_BUFFER = 1_000_000


def check_libp2p_version() -> None:
    """Refuse to run (and to patch internals) against any py-libp2p but the one we studied."""
    installed = importlib.metadata.version("libp2p")
    module_version = getattr(libp2p, "__version__", installed)
    if installed != SUPPORTED_LIBP2P_VERSION or module_version != SUPPORTED_LIBP2P_VERSION:
        raise P2PError(
            f"node.p2p supports py-libp2p {SUPPORTED_LIBP2P_VERSION} only (found {installed}): "
            "it tunes GossipSub internals whose names and defaults change between releases; "
            "re-check docs/p2p.md section 'Library patches' before changing the pin"
        )


class _RoomyRpcQueue(RpcQueue):
    """``RpcQueue`` whose default capacity is ours, not libp2p's 32."""

    default_max_size = 32

    def __init__(
        self, max_size: int | None = None, max_message_size: int = DefaultMaxMessageSize
    ) -> None:
        super().__init__(max_size or type(self).default_max_size, max_message_size)


def patch_gossip_queues(peer_queue_size: int) -> None:
    # Pubsub builds each per-peer queue as ``RpcQueue()`` and each subscription channel with
    # ``SUBSCRIPTION_CHANNEL_SIZE``, both looked up in the pubsub module at call time.
    check_libp2p_version()
    for name in ("RpcQueue", "SUBSCRIPTION_CHANNEL_SIZE"):
        if not hasattr(_pubsub_module, name):
            raise P2PError(f"libp2p.pubsub.pubsub.{name} is gone: cannot tune GossipSub queues")
    # Process-wide (module globals): keep the largest size any host asked for.
    _RoomyRpcQueue.default_max_size = max(_RoomyRpcQueue.default_max_size, peer_queue_size)
    setattr(_pubsub_module, "RpcQueue", _RoomyRpcQueue)  # noqa: B010
    setattr(_pubsub_module, "SUBSCRIPTION_CHANNEL_SIZE", _LIBP2P_SUBSCRIPTION_BUFFER)  # noqa: B010


# peer id -> the signed peer record bytes it last sent and we accepted.
_accepted_records: dict[ID, bytes] = {}


def _consume_record_once(msg: Any, host: IHost, peer_id: ID) -> bool:
    """libp2p attaches the sender's signed peer record to every pubsub RPC and verifies it on
    every receipt (7-10% of a busy node's CPU); the same bytes from the same peer were verified
    already."""
    if not msg.HasField("senderRecord"):
        return True
    record = bytes(msg.senderRecord)
    if _accepted_records.get(peer_id) == record:
        return True
    accepted = bool(_original_consume_record(msg, host, peer_id))
    if accepted:
        if len(_accepted_records) >= 4096:
            _accepted_records.clear()
        _accepted_records[peer_id] = record
    return accepted


def patch_record_verification() -> None:
    check_libp2p_version()
    for module in (_pubsub_module, _gossipsub_module):
        if not hasattr(module, "maybe_consume_signed_record"):
            raise P2PError(f"{module.__name__}.maybe_consume_signed_record is gone")
        setattr(module, "maybe_consume_signed_record", _consume_record_once)  # noqa: B010


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
    check_libp2p_version()
    swarm = _swarm_module.Swarm
    for name in ("_do_handle_inbound_connection", "_handle_inbound_connection",
                 "_build_remote_multiaddr", "upgrade_inbound_raw_conn"):
        if not hasattr(swarm, name):
            raise P2PError(f"libp2p Swarm.{name} is gone: cannot fix inbound connection slots")
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
    check_libp2p_version()
    store = _peerstore_module.PeerStore
    if not hasattr(store, "maybe_delete_peer_record"):
        raise P2PError("libp2p PeerStore.maybe_delete_peer_record is gone")
    setattr(store, "maybe_delete_peer_record", _drop_record_without_live_addrs)  # noqa: B010


class _NamedLoggingShim:
    """Stands in for the ``logging`` module inside a libp2p module that logs on the root logger.

    ``logging.debug(...)`` on a root logger without handlers runs ``logging.basicConfig()``,
    which would install a stderr handler and make the daemon's own logging setup a no-op.
    """

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def __getattr__(self, attr: str) -> object:
        if attr in ("debug", "info", "warning", "error", "exception", "critical", "log"):
            return getattr(self._logger, attr)
        return getattr(logging, attr)


def tame_libp2p_logging(level: str) -> None:
    """Route libp2p's records through normal logging at ``level``, unless LIBP2P_DEBUG is set."""
    if os.environ.get("LIBP2P_DEBUG"):
        return
    check_libp2p_version()
    shim = _NamedLoggingShim(_swarm_connection_module.__name__)
    setattr(_swarm_connection_module, "logging", shim)  # noqa: B010
    numeric = logging.getLevelName(level.upper())
    root = logging.getLogger("libp2p")
    root.setLevel(numeric)
    root.propagate = True
    # Some modules pin their own level (auto_connector logs INFO every 30 s): lift them too.
    for name, item in list(logging.root.manager.loggerDict.items()):
        if name.startswith("libp2p.") and isinstance(item, logging.Logger) and item.level:
            item.setLevel(max(item.level, numeric))
