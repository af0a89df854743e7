"""A port a test binds twice lies where the kernel picks no port by itself (tests.harness.ports)."""

from __future__ import annotations

import socket

from tests.harness.ports import LOWEST, ephemeral_low, reusable_port


def test_a_reusable_port_is_free_and_below_the_ephemeral_range() -> None:
    low = ephemeral_low()
    assert LOWEST < low <= 65535
    for _ in range(20):
        port = reusable_port()
        assert LOWEST <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: a node can listen there


def test_a_port_0_bind_lands_in_the_ephemeral_range_that_reusable_ports_avoid() -> None:
    # What the old helpers returned: a port the kernel may hand to any connection once freed.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert sock.getsockname()[1] >= ephemeral_low()
