"""Closing a dead connection at once (a workaround for py-libp2p 0.8.1, entry T1 of
``node.p2p.compat``).

libp2p closes a connection politely: yamux writes a GO_AWAY frame and a reset for each open
stream, and only then tells the notifees (our host's peer table, "disconnected"). Over a
connection whose peer went silent (a network outage) those writes block forever once the TCP
send buffer is full, so the close never finishes, the peer stays "connected" for us and is
never redialled (``P2PHost.connect`` returns early for a connected peer). :func:`abort_socket`
shuts the connection's TCP socket down first (with ``SO_LINGER`` 0, so that the kernel drops
what it still holds): blocked writes fail at once, the read loop sees the end, and libp2p's own
clean-up runs to the notification.

A relayed connection has no socket of its own (it is a stream over the relay's connection,
which must stay up): it is left to libp2p's close.
"""

from __future__ import annotations

import contextlib
import socket
import struct

from libp2p.abc import INetConn

from node.p2p.compat import tcp_socket_of
from node.p2p.relay import connection_is_relayed

__all__ = ["abort_socket"]


def abort_socket(conn: INetConn) -> bool:
    """Shut ``conn``'s TCP socket down now; False when it has none we can reach."""
    sock = None if connection_is_relayed(conn) else tcp_socket_of(conn)
    if sock is None:
        return False
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    return True
