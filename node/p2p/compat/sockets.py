"""The TCP sockets under py-libp2p 0.8.1: reached to close a dead connection at once (entry T1 of
the table in ``node.p2p.compat``), and their reuse flags chosen per host (entry T2).

T1, the socket under a connection: libp2p closes a connection politely (GO_AWAY and a reset per
stream written first), which blocks forever over a dead link; ``node.p2p.teardown`` shuts the
socket down first, found here through the wrappers between a Yamux connection and its trio
socket (:func:`tcp_socket_of`).

T2, reuse flags. 0.8.1 sets SO_REUSEPORT on every listener and on hole-punch dials (its
module function ``_set_reuse_flags``). With it a second node binds a port already in use and
the kernel splits incoming connections between the two; without hole punching we want a busy
port to be a bind error. The module function is replaced by one that asks the host being
built or run: :func:`choose_reuse_flags` sets, for the task opening the host and every task it
starts, whether that host punches holes (shared port) or not (SO_REUSEADDR only).
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
from typing import Any

import libp2p.transport.tcp.tcp as _tcp_module
import trio
from libp2p.abc import INetConn

from node.p2p.compat.version import require

__all__ = [
    "choose_reuse_flags",
    "patch_reuse_flags",
    "restore_reuse_flags",
    "tcp_socket_of",
]

# Whether the host of the current task shares its listen port (hole punching).
_share_port: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "libp2p_share_port", default=False)


def choose_reuse_flags(hole_punch: bool) -> contextvars.Token[bool]:
    """Sockets that this task (and the tasks it starts) opens share their port iff
    ``hole_punch``; hand the token back to :func:`restore_reuse_flags` when the host stops."""
    return _share_port.set(hole_punch)


def restore_reuse_flags(token: contextvars.Token[bool]) -> None:
    _share_port.reset(token)


def _set_reuse_flags(sock: Any) -> None:
    """SO_REUSEADDR always (a restarted node rebinds despite TIME_WAIT), SO_REUSEPORT only for
    a host that punches holes: a hole-punch dial leaves from the listen port, which needs both
    (DESIGN §11); ``open_host`` checks that port is free before listening instead."""
    options = [socket.SO_REUSEADDR]
    if _share_port.get():
        options.append(socket.SO_REUSEPORT)
    for option in options:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, 1)


def patch_reuse_flags() -> None:
    require(_tcp_module, "_set_reuse_flags", "_open_reuseport_listeners", "_open_tcp_stream_from")
    setattr(_tcp_module, "_set_reuse_flags", _set_reuse_flags)  # noqa: B010

# The wrappers between a yamux connection and its trio socket, in libp2p 0.8.1: the secure
# session (``secured_conn``), noise's reader-writer, the raw connection, the TCP stream.
_LINKS = ("secured_conn", "read_writer", "read_write_closer", "conn", "stream")
_MAX_DEPTH = 8


def tcp_socket_of(conn: INetConn) -> Any | None:
    """The trio socket under a direct connection, or None (not found: callers skip relayed
    connections, whose socket is the relay's)."""
    obj: Any = getattr(conn, "muxed_conn", None)
    for _ in range(_MAX_DEPTH):
        if obj is None:
            return None
        if isinstance(obj, trio.SocketStream):
            return obj.socket
        obj = next((getattr(obj, name) for name in _LINKS
                    if getattr(obj, name, None) is not None), None)
    return None
