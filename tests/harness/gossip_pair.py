"""Two real hosts on the default settings, meshed on one topic: the pair the gossip path tests
(receive path, send path) count calls on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.p2p import P2PHost
from node.p2p.run import open_host
from tests.harness.cluster import until

__all__ = ["meshed_pair", "send_one_by_one"]


@asynccontextmanager
async def meshed_pair(topic: str) -> AsyncIterator[tuple[P2PHost, P2PHost, Any]]:
    """Sender and receiver on the default settings, in each other's mesh; the receiver's inbox."""
    async with open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as sender, \
            open_host(Ed25519PrivateKey.generate(), clock=SystemClock()) as receiver:
        inbox = await receiver.subscribe(topic)
        await sender.subscribe(topic)
        await sender.connect(receiver.listen_addrs[0])
        await until(lambda: receiver.peer_id in sender.mesh_peers(topic), 30, "not meshed")
        yield sender, receiver, inbox


async def send_one_by_one(sender: P2PHost, inbox: Any, topic: str, count: int) -> None:
    """Publish ``count`` 1.7 KB messages, each once the previous one arrived."""
    with trio.fail_after(60):
        for i in range(count):
            data = b"m%d" % i + bytes(1_700)
            await sender.publish(topic, data)
            assert (await inbox.receive()).data == data
