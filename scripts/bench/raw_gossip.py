#!/usr/bin/env python3
"""One plain GossipSub peer for the cluster benchmark: no SDS, no storage, no HTTP.

Started as a subprocess by ``cluster_bench.py``. It opens a host with ``node.p2p.open_host`` (the
same hardened GossipSub settings and compat patches as a node), or with ``--stock`` a stock
py-libp2p 0.8.1 host, ``Pubsub`` and ``GossipSub`` as shipped (``stock_gossip.py``: the process
never imports ``node.p2p``), subscribes to one topic and then obeys JSON commands, one per line
on stdin, answering with one JSON line each on stdout:

* ``{"cmd": "connect", "addrs": [...]}`` -> ``{"connected": n}``
* ``{"cmd": "peers"}`` -> ``{"peers": n, "gossip_peers": n, "mesh": n}``
* ``{"cmd": "step", "step": k, "rate": R, "duration": D, "index": i, "nodes": n,
  "start_at": T, "payload": bytes, "window_s": 10}``: publishes its share of an open-loop
  schedule (message ``j`` of the step at ``T + j / R``, published by worker ``j % n``), then
  waits until it has every message of the step or ``window_s`` after the last scheduled send,
  and answers ``{"sent": {j: t}, "recv": {j: t}}`` (wall-clock seconds).
* ``{"cmd": "quit"}``

Messages carry ``step`` and ``j`` in an 8-byte header, padded to the size of a node's SDS gossip
message so that both benchmarks move the same bytes.
"""

from __future__ import annotations

import json
import math
import struct
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

TOPIC = "/syncnode-bench/raw"
_HEADER = struct.Struct(">II")


def schedule(rate: float, duration: float) -> int:
    """Number of messages in a step (shared with the coordinator)."""
    return max(1, math.floor(rate * duration))


@dataclass
class Peer:
    """What the worker needs of a GossipSub peer, ours or stock."""

    addr: str
    publish: Callable[[bytes], Awaitable[None]]
    messages: AsyncIterator[bytes]
    connect: Callable[[str], Awaitable[object]]
    peers: Callable[[], dict[str, int]]


class Worker:
    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        # step -> j -> receive time; filled by the receive loop for every step.
        self.recv: dict[int, dict[int, float]] = {}
        self._changed = trio.Event()

    async def receive_loop(self) -> None:
        async for data in self.peer.messages:
            now = time.time()
            step, j = _HEADER.unpack_from(data)
            self.recv.setdefault(step, {}).setdefault(j, now)
            self._changed.set()

    async def step(self, cmd: dict[str, Any]) -> dict[str, Any]:
        step, rate, index, nodes = cmd["step"], cmd["rate"], cmd["index"], cmd["nodes"]
        total = schedule(rate, cmd["duration"])
        start_at = cmd["start_at"]
        padding = b"\0" * max(0, cmd["payload"] - _HEADER.size)
        sent: dict[int, float] = {}
        mine = [j for j in range(total) if j % nodes == index]
        # Open loop, the way a node publishes: the schedule enqueues (that instant is the send
        # time, so queueing counts in the latency) and one task drains the queue in order.
        send, receive = trio.open_memory_channel[bytes](math.inf)

        async def publisher() -> None:
            async for data in receive:
                await self.peer.publish(data)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher)
            async with send:
                for j in mine:
                    delay = start_at + j / rate - time.time()
                    if delay > 0:
                        await trio.sleep(delay)
                    sent[j] = time.time()
                    send.send_nowait(_HEADER.pack(step, j) + padding)
        # Stock GossipSub also hands a publisher its own messages: wait for the others' only.
        others = set(range(total)) - set(mine)
        deadline = start_at + (total - 1) / rate + cmd["window_s"]
        got = self.recv.setdefault(step, {})
        while not others <= got.keys() and time.time() < deadline:
            self._changed = trio.Event()
            with trio.move_on_after(max(0.0, min(0.5, deadline - time.time()))):
                await self._changed.wait()
        recv = dict(self.recv.pop(step, {}))
        return {"sent": sent, "recv": recv}


@asynccontextmanager
async def our_peer() -> AsyncIterator[Peer]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from node.clock import SystemClock
    from node.p2p import P2PConfig
    from node.p2p.run import open_host

    config = P2PConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",))
    async with open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as host:
        inbox = await host.subscribe(TOPIC)

        async def messages() -> AsyncIterator[bytes]:
            async for message in inbox:
                yield message.data

        async def publish(data: bytes) -> None:
            await host.publish(TOPIC, data)

        def peers() -> dict[str, int]:
            return {"peers": len(host.connected_peers()),
                    "gossip_peers": len(host.gossip_peers(TOPIC)),
                    "mesh": len(host.mesh_peers(TOPIC))}

        yield Peer(f"{host.listen_addrs[0]}", publish, messages(), host.connect, peers)


@asynccontextmanager
async def stock_peer() -> AsyncIterator[Peer]:
    from stock_gossip import open_stock_gossip

    async with open_stock_gossip("/ip4/127.0.0.1/tcp/0") as gossip:
        inbox = await gossip.pubsub.subscribe(TOPIC)

        async def messages() -> AsyncIterator[bytes]:
            while True:
                yield (await inbox.get()).data

        async def publish(data: bytes) -> None:
            await gossip.pubsub.publish(TOPIC, data)

        def peers() -> dict[str, int]:
            return {"peers": len(gossip.host.get_network().connections),
                    "gossip_peers": len(gossip.pubsub.peer_topics.get(TOPIC, set())),
                    "mesh": gossip.mesh_size(TOPIC)}

        yield Peer(gossip.addr, publish, messages(), gossip.connect, peers)


async def main(stock: bool) -> None:
    async with (stock_peer() if stock else our_peer()) as peer:
        worker = Worker(peer)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.receive_loop)
            _answer({"addr": peer.addr})
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline)
                if not line:
                    break
                cmd = json.loads(line)
                if cmd["cmd"] == "connect":
                    for addr in cmd["addrs"]:
                        await peer.connect(addr)
                    _answer({"connected": peer.peers()["peers"]})
                elif cmd["cmd"] == "peers":
                    _answer(peer.peers())
                elif cmd["cmd"] == "step":
                    _answer(await worker.step(cmd))
                else:
                    break
            nursery.cancel_scope.cancel()


def _answer(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    trio.run(main, "--stock" in sys.argv[1:])
