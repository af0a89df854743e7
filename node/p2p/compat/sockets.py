"""The TCP sockets under py-libp2p 0.8.1: reached to close a dead connection at once (entry T1 of
the table in ``node.p2p.compat``), and their reuse flags chosen per host (entry T2).

T1, the socket under a connection: libp2p closes a connection politely (GO_AWAY and a reset per
stream written first), which blocks forever over a dead link; ``node.p2p.teardown`` shuts the
socket down first, found here through the wrappers between a Yamux connection and its trio
socket (:func:`tcp_socket_of`).

T2, reuse flags. 0.8.1 sets SO_REUSEPORT on every listener and on hole-punch dials (its
module function ``_set_reuse_flags``). With it a second node binds a port already in use and
the kernel splits incoming connections between the two; without hole punching we want a busy
port to be a bind error. The module function is replaced by one that reads a context variable,
and :func:`share_port` wraps one host's TCP transport (its ``dial_with_source``, its listeners'
``listen``: the two paths to ``_set_reuse_flags``) so that the variable holds that host's
choice for the length of each call: two hosts of a process keep their own flags.

T3, a closing listener's addresses. ``TCPListener.close`` closes its sockets (concurrently)
before it clears its list of them; an identify request answered meanwhile (a peer still
connected while the host shuts down) asks the host for its addresses, ``getsockname`` of a
closed socket raised ``EBADF``, and the exception ended the host's nursery: a clean shutdown
failed. The listener's ``get_addrs`` is replaced by one that skips closed sockets.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import libp2p.transport.tcp.tcp as _tcp_module
import trio
from libp2p.abc import IHost, INetConn

from node.p2p.compat.version import require

__all__ = [
    "patch_closing_listener",
    "patch_reuse_flags",
    "share_port",
    "tcp_socket_of",
]

# Whether the socket being set up belongs to a host that punches holes (set by share_port).
_share_port: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "libp2p_share_port", default=False)


def _with_flags(call: Callable[..., Awaitable[Any]], share: bool) -> Callable[..., Any]:
    async def flagged(*args: Any, **kwargs: Any) -> Any:
        token = _share_port.set(share)
        try:
            return await call(*args, **kwargs)
        finally:
            _share_port.reset(token)
    return flagged


def share_port(host: IHost, share: bool) -> None:
    """``host``'s TCP listeners and hole-punch dials share their port iff ``share``."""
    network: Any = host.get_network()  # the Swarm (INetworkService lacks its manager)
    for transport in network.transport_manager.get_transports():
        if not isinstance(transport, _tcp_module.TCP):
            continue
        create_listener = transport.create_listener

        def listener_with_flags(*args: Any, _create: Any = create_listener) -> Any:
            listener = _create(*args)
            setattr(listener, "listen", _with_flags(listener.listen, share))  # noqa: B010
            return listener

        setattr(transport, "create_listener", listener_with_flags)  # noqa: B010
        setattr(transport, "dial_with_source",  # noqa: B010
                _with_flags(transport.dial_with_source, share))


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
    require(_tcp_module.TCP, "create_listener", "dial_with_source")
    require(_tcp_module.TCPListener, "listen")
    setattr(_tcp_module, "_set_reuse_flags", _set_reuse_flags)  # noqa: B010

def _open_addrs(self: Any) -> tuple[Any, ...]:
    """The listener's addresses, of its sockets still open (a closed trio socket's fileno is
    -1): a listener closing has none to give, not an error."""
    return tuple(_tcp_module._multiaddr_from_socket(listener.socket)
                 for listener in self.listeners if listener.socket.fileno() != -1)


def patch_closing_listener() -> None:
    require(_tcp_module, "_multiaddr_from_socket")
    require(_tcp_module.TCPListener, "get_addrs", "close")
    setattr(_tcp_module.TCPListener, "get_addrs", _open_addrs)  # noqa: B010


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
