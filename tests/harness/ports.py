"""Loopback ports a test binds twice (a node restarted where it was, another process on a
dead node's address): outside the kernel's ephemeral range.

A port taken with ``bind(port 0)`` and freed again lies in ``ip_local_port_range``, from which
the kernel also picks the local port of every outgoing connection and every other ``port 0``
listener on the machine: while it is free between two binds (a node killed and restarted), a
connection of a test on the other worker can take it, and the second bind fails with "Address
already in use". Below that range the kernel hands out nothing by itself.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Above the well-known and the usual service ports (PostgreSQL's 5432, Spark's 7077 and 8080).
LOWEST = 10_000


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768 where it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def reusable_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now that no ``port 0`` bind or outgoing connection will take
    when it is freed (tests pick at random: two of them meet on one seldom, and a port in use
    is skipped)."""
    low = ephemeral_low()
    for _ in range(200):
        port = random.randrange(LOWEST, low)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{LOWEST}, {low}) on {host}")
