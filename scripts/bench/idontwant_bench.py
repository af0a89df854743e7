#!/usr/bin/env python3
"""IDONTWANT benchmark: GossipSub 1.1 against 1.2, ours (early IDONTWANT) and stock 0.8.1's.

Four hosts of one process on 127.0.0.1 in a full mesh, host 0 publishes 1,700-byte messages,
hosts 1-3 receive them (each also gets the two copies its mesh peers forward). Four variants:

* ``v11``: our stack with the node's default router (``/meshsub/1.1.0``, ``1.0.0``);
* ``v12_early``: our stack with ``P2PConfig.gossip_idontwant`` (``[p2p] gossip_idontwant``):
  1.2.0 first, IDONTWANT on receipt before validation, on the next RPC queued for each peer
  (compat entry G6, docs/upstream.md);
* ``stock_v11``: stock py-libp2p 0.8.1 (``stock_gossip.py``) offering 1.1.0 and 1.0.0;
* ``stock_v12``: the same offering 1.2.0 first: 0.8.1's own IDONTWANT, after validation, in a
  control RPC of its own per mesh peer.

Our stack patches py-libp2p process-wide (``node.p2p.compat``), so each variant runs in its
own subprocess (``--worker VARIANT``) and the stock ones never import ``node.p2p``. Rounds
alternate the variants; each figure is the median over rounds.

Figures per variant: ``cpu_us_*``, the process's CPU time (all four hosts) per published
message over the timed part, after a warm-up; for ours also ``dups_per_msg_*``, duplicate
copies read per message by all hosts (the hosts' ``gossip_duplicates_received``; 6 in a
four-host full mesh without IDONTWANT), and for the early variant ``idontwant_per_msg_*``
(ids sent, ``gossip_idontwant_sent``) and ``idontwant_alone_per_msg_*`` (RPCs started for
them because nothing was queued for the peer, ``gossip_idontwant_rpcs``). Stock is measured
for CPU only: counting its copies needs its internals or its metrics channel (a base58 id per
RPC), and the stock process must run unpatched. The publisher keeps at most ``WINDOW``
messages in flight (counted as delivered at all three receivers), so that no queue drops any.
The last line is the JSON result, also written to docs/bench/idontwant.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from benchjson import finish, smoke_path  # noqa: E402
from workers import Counter, median, spawn_worker  # noqa: E402

#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("cpu_us_v11", "cpu_us_v12_early", "cpu_us_stock_v11", "cpu_us_stock_v12",
             "dups_per_msg_v11", "dups_per_msg_v12_early", "idontwant_per_msg_v12_early",
             "idontwant_alone_per_msg_v12_early", "messages", "message_bytes", "rounds",
             "load_avg_1m", "cores")
OUT = ROOT / "docs" / "bench" / "idontwant.json"
VARIANTS = ("v11", "v12_early", "stock_v11", "stock_v12")
HOSTS = 4
RECEIVERS = HOSTS - 1
MESSAGE_BYTES = 1_700
# Stock's per-peer queue holds 32 RPCs and drops the rest silently (compat P6); with 0.8.1's
# IDONTWANT each message queues two or more RPCs per peer, so 32 messages in flight lose some.
WINDOW = 8
TOPIC = "/syncnode-bench/idontwant"
LISTEN = "/ip4/127.0.0.1/tcp/0"
MESH_TIMEOUT_S = 30


class Group:
    """What a variant gives the driver: publish, counters to read, the deliveries."""

    def __init__(self, publish: Callable[[bytes], Awaitable[None]],
                 counters: Callable[[], dict[str, int]], got: Counter) -> None:
        self.publish = publish
        self.counters = counters
        self.got = got


async def drive(group: Group, warmup: int, n: int) -> dict[str, float]:
    """Publish ``warmup`` then ``n`` messages; CPU and wall per message of the ``n``, and the
    counters' growth per message."""
    payload = os.urandom(MESSAGE_BYTES)
    sent = 0

    async def burst(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            await group.got.reach(RECEIVERS * (sent - WINDOW + 1))
            await group.publish(payload)
            sent += 1
        with trio.fail_after(60):
            await group.got.reach(RECEIVERS * sent)

    await burst(warmup)
    before = group.counters()
    cpu, wall = time.process_time(), time.perf_counter()
    await burst(n)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    after = group.counters()
    out = {"cpu": cpu / n * 1e6, "wall": wall / n * 1e6}
    out.update({k: (after[k] - before[k]) / n for k in after})
    return out


async def until_meshed(mesh_sizes: Callable[[], list[int]]) -> None:
    with trio.fail_after(MESH_TIMEOUT_S):
        while any(size < RECEIVERS for size in mesh_sizes()):
            await trio.sleep(0.05)


# -- our stack ------------------------------------------------------------------------------


@asynccontextmanager
async def ours(idontwant: bool) -> AsyncIterator[Group]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from node.clock import SystemClock
    from node.p2p import P2PConfig
    from node.p2p.run import open_host

    config = P2PConfig(listen_addrs=(LISTEN,), gossip_idontwant=idontwant)
    got = Counter()
    async with AsyncExitStack() as stack:
        hosts = [await stack.enter_async_context(
            open_host(Ed25519PrivateKey.generate(), config, clock=SystemClock()))
            for _ in range(HOSTS)]
        nursery = await stack.enter_async_context(trio.open_nursery())
        for i, host in enumerate(hosts):
            inbox = await host.subscribe(TOPIC)
            nursery.start_soon(_drain, inbox.receive, got.add if i else None)
        for i, host in enumerate(hosts):
            for other in hosts[i + 1:]:
                await host.connect(f"{other.listen_addrs[0]}/p2p/{other.peer_id}")
        await until_meshed(lambda: [len(h.mesh_peers(TOPIC)) for h in hosts])

        def counters() -> dict[str, int]:
            return {"dups": sum(h.stats.gossip_duplicates_received for h in hosts),
                    "idontwant": sum(h.stats.gossip_idontwant_sent for h in hosts),
                    "alone": sum(h.stats.gossip_idontwant_rpcs for h in hosts)}

        async def publish(data: bytes) -> None:
            await hosts[0].publish(TOPIC, data)

        yield Group(publish, counters, got)
        nursery.cancel_scope.cancel()


async def _drain(receive: Callable[[], Awaitable[Any]], delivered: Callable[[], None] | None,
                 ) -> None:
    """A host's subscription: counted at a receiver, discarded at the publisher."""
    while True:
        await receive()
        if delivered is not None:
            delivered()


# -- stock py-libp2p ------------------------------------------------------------------------


@asynccontextmanager
async def stock(protocols: Sequence[str]) -> AsyncIterator[Group]:
    from stock_gossip import open_stock_gossip

    got = Counter()
    async with AsyncExitStack() as stack:
        hosts = [await stack.enter_async_context(open_stock_gossip(LISTEN, protocols))
                 for _ in range(HOSTS)]
        nursery = await stack.enter_async_context(trio.open_nursery())
        for i, host in enumerate(hosts):
            inbox = await host.pubsub.subscribe(TOPIC)
            nursery.start_soon(_drain, inbox.get, got.add if i else None)
        for i, host in enumerate(hosts):
            for other in hosts[i + 1:]:
                await host.connect(other.addr)
        await until_meshed(lambda: [h.mesh_size(TOPIC) for h in hosts])

        async def publish(data: bytes) -> None:
            await hosts[0].pubsub.publish(TOPIC, data)

        yield Group(publish, dict, got)
        nursery.cancel_scope.cancel()


# -- driver ---------------------------------------------------------------------------------


async def run_variant(variant: str, warmup: int, n: int) -> dict[str, float]:
    v12 = ("/meshsub/1.2.0", "/meshsub/1.1.0", "/meshsub/1.0.0")
    v11 = ("/meshsub/1.1.0", "/meshsub/1.0.0")
    group_of = {"v11": lambda: ours(False), "v12_early": lambda: ours(True),
                "stock_v11": lambda: stock(v11), "stock_v12": lambda: stock(v12)}
    result: dict[str, float] = {}
    try:
        async with group_of[variant]() as group:
            result = await drive(group, warmup, n)
    except Exception as exc:
        # Stock 0.8.1 can fail while its hosts stop (a message arriving at a pubsub whose
        # task nursery has closed): the figures are in by then.
        if not result:
            raise
        print(f"{variant}: error while the hosts stopped, after the measurement: {exc!r}",
              file=sys.stderr)
    return result


def spawn(variant: str, n: int) -> dict[str, float]:
    return spawn_worker(__file__, variant, n, ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny size, JSON to a temp file")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.messages or (40 if args.smoke else 3_000)
    if args.worker:
        print(json.dumps(trio.run(run_variant, args.worker, max(20, n // 10), n)))
        return 0
    rounds = args.rounds or (1 if args.smoke else 3)
    load = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for round_ in range(rounds):
        # Alternate the order too, so no variant always runs first after the previous one.
        order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
        for variant in order:
            runs[variant].append(spawn(variant, n))
    result: dict[str, Any] = {f"cpu_us_{v}": median(runs[v], "cpu") for v in VARIANTS}
    result.update({
        "dups_per_msg_v11": median(runs["v11"], "dups", 2),
        "dups_per_msg_v12_early": median(runs["v12_early"], "dups", 2),
        "idontwant_per_msg_v12_early": median(runs["v12_early"], "idontwant", 2),
        "idontwant_alone_per_msg_v12_early": median(runs["v12_early"], "alone", 2),
        "messages": n, "message_bytes": MESSAGE_BYTES, "rounds": rounds,
        "load_avg_1m": round(max(load, os.getloadavg()[0]), 2), "cores": os.cpu_count(),
    })
    wall = {v: median(runs[v], "wall") for v in VARIANTS}
    print(f"{HOSTS} hosts, full mesh, {MESSAGE_BYTES}-byte messages from one, {n} per variant, "
          f"median of {rounds} rounds, load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'variant':10} {'CPU us/msg':>11} {'wall us/msg':>12} {'dups/msg':>9} "
          f"{'IDONTWANT/msg':>14} {'alone/msg':>10}")
    for v in VARIANTS:
        ours_only = not v.startswith("stock")
        dups = result.get(f"dups_per_msg_{v}") if ours_only else "n/a"
        sent = result.get(f"idontwant_per_msg_{v}", 0.0 if ours_only else "n/a")
        alone = result.get(f"idontwant_alone_per_msg_{v}", 0.0 if ours_only else "n/a")
        print(f"{v:10} {result[f'cpu_us_{v}']!s:>11} {wall[v]!s:>12} {dups!s:>9} {sent!s:>14} "
              f"{alone!s:>10}")
    return finish(result, JSON_KEYS, smoke_path("idontwant") if args.smoke else OUT)


if __name__ == "__main__":
    sys.exit(main())
