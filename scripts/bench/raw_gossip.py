#!/usr/bin/env python3
"""One plain GossipSub peer for the cluster benchmark: no SDS, no storage, no HTTP.

Started as a subprocess by ``cluster_bench.py``. It opens a host with ``node.p2p.open_host`` (the
same hardened GossipSub settings as a node), subscribes to one topic and then obeys JSON
commands, one per line on stdin, answering with one JSON line each on stdout:

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
from typing import Any

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.clock import SystemClock
from node.p2p import GossipMessage, P2PConfig, P2PHost
from node.p2p.run import open_host

TOPIC = "/syncnode-bench/raw"
_HEADER = struct.Struct(">II")


def schedule(rate: float, duration: float) -> int:
    """Number of messages in a step (shared with the coordinator)."""
    return max(1, math.floor(rate * duration))


class Worker:
    def __init__(self, host: P2PHost, messages: trio.MemoryReceiveChannel[GossipMessage]) -> None:
        self.host = host
        self.messages = messages
        # step -> j -> receive time; filled by the receive loop for every step.
        self.recv: dict[int, dict[int, float]] = {}
        self._changed = trio.Event()

    async def receive_loop(self) -> None:
        async for message in self.messages:
            now = time.time()
            step, j = _HEADER.unpack_from(message.data)
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
                await self.host.publish(TOPIC, data)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher)
            async with send:
                for j in mine:
                    delay = start_at + j / rate - time.time()
                    if delay > 0:
                        await trio.sleep(delay)
                    sent[j] = time.time()
                    send.send_nowait(_HEADER.pack(step, j) + padding)
        others = total - len(mine)
        deadline = start_at + (total - 1) / rate + cmd["window_s"]
        got = self.recv.setdefault(step, {})
        while len(got) < others and time.time() < deadline:
            self._changed = trio.Event()
            with trio.move_on_after(max(0.0, min(0.5, deadline - time.time()))):
                await self._changed.wait()
        recv = dict(self.recv.pop(step, {}))
        return {"sent": sent, "recv": recv}


async def main() -> None:
    key = Ed25519PrivateKey.generate()
    config = P2PConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",))
    async with open_host(key, config, clock=SystemClock()) as host:
        messages = await host.subscribe(TOPIC)
        worker = Worker(host, messages)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.receive_loop)
            _answer({"addr": host.listen_addrs[0], "peer_id": host.peer_id})
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline)
                if not line:
                    break
                cmd = json.loads(line)
                if cmd["cmd"] == "connect":
                    for addr in cmd["addrs"]:
                        await host.connect(addr)
                    _answer({"connected": len(host.connected_peers())})
                elif cmd["cmd"] == "peers":
                    _answer({"peers": len(host.connected_peers()),
                             "gossip_peers": len(host.gossip_peers(TOPIC)),
                             "mesh": len(host.mesh_peers(TOPIC))})
                elif cmd["cmd"] == "step":
                    _answer(await worker.step(cmd))
                else:
                    break
            nursery.cancel_scope.cancel()


def _answer(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    trio.run(main)
