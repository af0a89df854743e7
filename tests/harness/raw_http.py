"""One HTTP/1.1 message read off a plain socket, for tests that speak HTTP by hand (a proxy that
drops an answer, requests whose body comes after their headers)."""

from __future__ import annotations

import re
import socket

__all__ = ["read_message"]

_LENGTH = re.compile(rb"(?im)^content-length: *(\d+)")


def read_message(conn: socket.socket) -> tuple[bytes, bytes] | None:
    """The next message's start line and headers, and its body (by its ``Content-Length``;
    none without one); ``None`` when the peer closes before the message is whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(match.group(1)) if (match := _LENGTH.search(head)) else 0
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return head, body
