#!/usr/bin/env python3
"""Transport benchmark: the cost of one hop, our p2p stack versus stock py-libp2p 0.8.1.

Two hosts in one process on 127.0.0.1, 1.7 KB messages, A -> B, four cases:

* ``hop_us``: a raw stream, one length-prefixed frame per write, on the node's own stack
  (``node.p2p.run.open_host``: ``P2PHost.open_stream`` / ``set_stream_handler``, FramedStream);
* ``hop_us_stock``: the same on stock py-libp2p (``libp2p.new_host`` defaults, ``new_stream``,
  libp2p's varint prefix: ``encode_varint_prefixed`` / ``read_varint_prefixed_bytes``);
* ``gossip_hop_us``: GossipSub ``publish`` A -> B on the node's stack (``open_host``: our
  ``GuardedPubsub``, the patched queues and record handling, the node's default settings);
* ``gossip_hop_us_stock``: stock ``Pubsub`` + ``GossipSub`` on ``new_host`` with the router
  arguments the node passes (degree, history, spam/adaptive/eclipse protection off: stock's
  default spam protection caps a topic at 10 messages/s, which would measure the cap, not
  the hop). No subclass, no patch of ours.

Our stack patches py-libp2p process-wide (``node.p2p.compat``, applied once per process), so
each stack runs in its own subprocess (``--worker ours`` /
``--worker stock``): the stock process never imports ``node.p2p``. Runs alternate between the
two ``--rounds`` times; each figure is the median over rounds.

A figure is CPU microseconds per message: the process's CPU time (both hosts: sender and
receiver of the hop) over the messages of the timed part, after a warm-up. The sender keeps at
most ``WINDOW`` messages in flight (counted as received by B), so that no queue drops any
(stock GossipSub's per-peer queue holds 100). ``*_wall_us`` keys give wall time per message.
The last line is the JSON result, also written to docs/bench/transport.json. ``--profile CASE``
(raw|gossip) runs one worker's case under cProfile and prints its top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from benchjson import finish, smoke_path  # noqa: E402
from workers import Counter, median, spawn_worker  # noqa: E402

from node.clock import SystemClock  # noqa: E402

#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("hop_us", "hop_us_stock", "gossip_hop_us", "gossip_hop_us_stock",
             "hop_wall_us", "hop_wall_us_stock", "gossip_hop_wall_us",
             "gossip_hop_wall_us_stock", "messages", "message_bytes", "rounds", "load_avg_1m")
OUT = ROOT / "docs" / "bench" / "transport.json"
MESSAGE_BYTES = 1_700
WINDOW = 32
TOPIC = "/syncnode-bench/transport"
PROTOCOL = "/syncnode-bench/transport/1"
LISTEN = "/ip4/127.0.0.1/tcp/0"


async def timed(send: Callable[[bytes], Awaitable[None]], got: Counter, warmup: int,
                n: int) -> tuple[float, float]:
    """(CPU us, wall us) per message of ``n`` sends after ``warmup``, window-limited."""
    payload = os.urandom(MESSAGE_BYTES)
    sent = 0

    async def burst(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            await got.reach(sent - WINDOW + 1)
            await send(payload)
            sent += 1
        with trio.fail_after(60):
            await got.reach(sent)

    await burst(warmup)
    cpu, wall = time.process_time(), time.perf_counter()
    await burst(n)
    return ((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)


# -- our stack ------------------------------------------------------------------------------


async def ours(case: str, warmup: int, n: int) -> tuple[float, float]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from node.p2p import P2PConfig
    from node.p2p.frames import FramedStream
    from node.p2p.run import open_host

    config = P2PConfig(listen_addrs=(LISTEN,))
    got = Counter()
    async with open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as a, \
            open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()) as b, \
            trio.open_nursery() as nursery:
        await a.connect(f"{b.listen_addrs[0]}/p2p/{b.peer_id}")
        if case == "raw":
            async def serve(stream: FramedStream) -> None:
                async for _frame in stream:
                    got.add()

            b.set_stream_handler(PROTOCOL, serve)
            async with await a.open_stream(b.peer_id, PROTOCOL) as stream:
                result = await timed(stream.send, got, warmup, n)
        else:
            inbox = await b.subscribe(TOPIC)
            own = await a.subscribe(TOPIC)

            async def drain() -> None:
                async for _message in inbox:
                    got.add()

            async def discard() -> None:  # A's copies of its own publishes
                async for _message in own:
                    pass

            nursery.start_soon(drain)
            nursery.start_soon(discard)
            with trio.fail_after(30):
                while b.peer_id not in a.mesh_peers(TOPIC):
                    await trio.sleep(0.05)

            async def publish(data: bytes) -> None:
                await a.publish(TOPIC, data)

            result = await timed(publish, got, warmup, n)
        nursery.cancel_scope.cancel()
    return result


# -- stock py-libp2p ------------------------------------------------------------------------


async def stock(case: str, warmup: int, n: int) -> tuple[float, float]:
    if case == "gossip":
        return await stock_gossip(warmup, n)
    import multiaddr
    from libp2p import new_host
    from libp2p.abc import INetStream
    from libp2p.custom_types import TProtocol
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes
    from stock_gossip import dial_addr

    listen = [multiaddr.Multiaddr(LISTEN)]
    a, b = new_host(), new_host()
    got = Counter()
    async with a.run(listen_addrs=listen), b.run(listen_addrs=listen):

        async def serve(stream: INetStream) -> None:
            while True:
                await read_varint_prefixed_bytes(stream)
                got.add()

        b.set_stream_handler(TProtocol(PROTOCOL), serve)
        await a.connect(info_from_p2p_addr(multiaddr.Multiaddr(dial_addr(b))))
        stream = await a.new_stream(b.get_id(), [TProtocol(PROTOCOL)])

        async def send(data: bytes) -> None:
            await stream.write(encode_varint_prefixed(data))

        return await timed(send, got, warmup, n)


async def stock_gossip(warmup: int, n: int) -> tuple[float, float]:
    from stock_gossip import open_stock_gossip

    got = Counter()
    async with open_stock_gossip(LISTEN) as a, open_stock_gossip(LISTEN) as b, \
            trio.open_nursery() as nursery:
        await a.connect(b.addr)
        inbox = await b.pubsub.subscribe(TOPIC)
        own = await a.pubsub.subscribe(TOPIC)

        async def drain() -> None:
            while True:
                await inbox.get()
                got.add()

        async def discard() -> None:  # A's copies of its own publishes
            while True:
                await own.get()

        nursery.start_soon(drain)
        nursery.start_soon(discard)
        with trio.fail_after(30):
            while b.host.get_id() not in a.router.mesh.get(TOPIC, set()):
                await trio.sleep(0.05)

        async def publish(data: bytes) -> None:
            await a.pubsub.publish(TOPIC, data)

        result = await timed(publish, got, warmup, n)
        nursery.cancel_scope.cancel()
    return result


# -- driver ---------------------------------------------------------------------------------


def worker(stack: str, n: int, profile: str | None) -> dict[str, float]:
    run = ours if stack == "ours" else stock
    warmup = max(20, n // 10)
    out: dict[str, float] = {}
    for case in ("raw", "gossip"):
        if profile is not None and case != profile:
            continue
        prof = cProfile.Profile() if profile else None
        if prof is not None:
            prof.enable()
        cpu, wall = trio.run(run, case, warmup, n)
        if prof is not None:
            prof.disable()
            text = io.StringIO()
            stats = pstats.Stats(prof, stream=text)
            stats.sort_stats("tottime").print_stats(25)
            print(text.getvalue(), file=sys.stderr)
        out[f"{case}_cpu"], out[f"{case}_wall"] = cpu, wall
    return out


def spawn(stack: str, n: int, without: str = "") -> dict[str, float]:
    # The steps left out apply to our stack only (the stock worker never imports it; nor does
    # this driver at module level, since the workers are this file too).
    from node.p2p.compat import WITHOUT_ENV

    env = {WITHOUT_ENV: without} if without and stack == "ours" else {}
    return spawn_worker(__file__, stack, n, ROOT, env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny size, JSON to a temp file")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--worker", choices=("ours", "stock"), help=argparse.SUPPRESS)
    parser.add_argument("--profile", choices=("raw", "gossip"),
                        help="with --worker: profile one case (top functions to stderr)")
    parser.add_argument("--without", metavar="KEYS", default="",
                        help="our stack without these compat steps (e.g. W1,B1: each step "
                             "measured alone); the JSON goes to --out, never transport.json")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    args = parser.parse_args()
    n = args.messages or (200 if args.smoke else 5_000)
    if args.worker:
        print(json.dumps(worker(args.worker, n, args.profile)))
        return 0
    rounds = args.rounds or (1 if args.smoke else 3)
    load = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {"ours": [], "stock": []}
    from node.p2p.compat import steps_left_out

    steps_left_out(args.without)  # a bad name fails here, not in every worker
    if args.without and not (args.out or args.smoke):
        parser.error("--without writes its JSON to --out (transport.json is every step's)")
    for _ in range(rounds):
        for stack in ("ours", "stock"):
            runs[stack].append(spawn(stack, n, args.without))
    result: dict[str, Any] = {
        "hop_us": median(runs["ours"], "raw_cpu"),
        "hop_us_stock": median(runs["stock"], "raw_cpu"),
        "gossip_hop_us": median(runs["ours"], "gossip_cpu"),
        "gossip_hop_us_stock": median(runs["stock"], "gossip_cpu"),
        "hop_wall_us": median(runs["ours"], "raw_wall"),
        "hop_wall_us_stock": median(runs["stock"], "raw_wall"),
        "gossip_hop_wall_us": median(runs["ours"], "gossip_wall"),
        "gossip_hop_wall_us_stock": median(runs["stock"], "gossip_wall"),
        "messages": n, "message_bytes": MESSAGE_BYTES, "rounds": rounds,
        "load_avg_1m": round(max(load, os.getloadavg()[0]), 2),
        "without": args.without.upper(),
    }
    print(f"one hop, {MESSAGE_BYTES}-byte messages, {n} per case, median of {rounds} rounds, "
          f"load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'case':8} {'ours CPU us':>12} {'stock CPU us':>13} {'ours wall us':>13} "
          f"{'stock wall us':>14}")
    for case, prefix in (("raw", "hop"), ("gossip", "gossip_hop")):
        print(f"{case:8} {result[prefix + '_us']!s:>12} {result[prefix + '_us_stock']!s:>13} "
              f"{result[prefix + '_wall_us']!s:>13} {result[prefix + '_wall_us_stock']!s:>14}")
    out = smoke_path("transport") if args.smoke else (args.out or OUT)
    return finish(result, JSON_KEYS, out)


if __name__ == "__main__":
    sys.exit(main())
