"""Cardinal Streams consumer reassembly benchmark (single core).

Builds a chain of N blocks x 50 prefixed keys with the real Producer, shuffles the messages
within windows of 100 blocks (redundant producers and partitions reorder, but not across the
whole stream), adds 25% duplicates inside each window, and times Consumer.receive over all of
them (decoding included). Prints a table; the last line is a JSON object; a full run also writes
docs/bench/cardinal.json.

    python scripts/bench/cardinal_bench.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from benchjson import finish, smoke_path  # noqa: E402

from sync.cardinal import BlockApplied, Consumer, PrefixRouter, Producer, make_payload  # noqa: E402

#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("msgs_per_s", "peak_rss_mb")
KEYS_PER_BLOCK = 50
WINDOW = 100
DUP_RATE = 0.25


def build(blocks: int, rng: random.Random) -> list[tuple[bytes, bytes, str]]:
    producer = Producer(PrefixRouter({"acct/": "accounts", "store/": "storage"}, "blocks"))
    out: list[tuple[bytes, bytes, str]] = []
    parent = bytes(32)
    window: list[tuple[bytes, bytes, str]] = []
    for number in range(blocks):
        block_hash = hashlib.sha256(number.to_bytes(8, "big")).digest()
        updates = {
            f"{'acct' if i % 2 else 'store'}/{number:08d}/{i:02d}": rng.randbytes(32)
            for i in range(KEYS_PER_BLOCK)
        }
        payload = make_payload(block_hash, number, parent, number, updates)
        window.extend((m.key, m.value, m.channel) for m in producer.messages_for(payload))
        parent = block_hash
        if (number + 1) % WINDOW == 0 or number == blocks - 1:
            window.extend([m for m in window if rng.random() < DUP_RATE])
            rng.shuffle(window)
            out.extend(window)
            window = []
    return out


def run(msgs: list[tuple[bytes, bytes, str]]) -> tuple[float, float, Consumer, int]:
    consumer = Consumer(reorg_threshold=128)
    receive = consumer.receive
    applied = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for key, value, channel in msgs:
        receive(key, value, channel)
        # Drain as a node would, so the event list does not grow for the whole run.
        for event in consumer.events():
            applied += isinstance(event, BlockApplied)
    return time.perf_counter() - wall, time.process_time() - cpu, consumer, applied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 blocks instead of 10,000")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the run")
    parser.add_argument("--smoke", action="store_true",
                        help="200 blocks, JSON to a temp file (the make test smoke run)")
    args = parser.parse_args(argv)
    blocks = 200 if args.smoke else 1_000 if args.quick else 10_000
    msgs = build(blocks, random.Random(7))
    rss_before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
    elapsed, cpu, consumer, applied = run(msgs)
    if args.profile:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    if applied != blocks:
        print(f"error: applied {applied} of {blocks} blocks", file=sys.stderr)
        return 1
    # CPU time of this process: other work on the shared 2-core machine inflates wall time.
    rate = len(msgs) / cpu
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = [
        ("blocks", f"{blocks:,}"),
        ("keys per block", f"{KEYS_PER_BLOCK}"),
        ("messages (with duplicates)", f"{len(msgs):,}"),
        ("duplicates dropped", f"{consumer.stats.duplicates:,}"),
        ("shuffle window (blocks)", f"{WINDOW}"),
        ("elapsed wall (s)", f"{elapsed:.2f}"),
        ("elapsed CPU (s)", f"{cpu:.2f}"),
        ("messages / s (wall)", f"{len(msgs) / elapsed:,.0f}"),
        ("messages / s (CPU, single core)", f"{rate:,.0f}"),
        ("RSS before consuming (MB, message list)", f"{rss_before_mb:.1f}"),
        ("peak RSS (MB)", f"{peak_rss_mb:.1f}"),
        ("blocks / tree entries left", f"{consumer.pending_count()}"),
        ("load average (1 min)", f"{os.getloadavg()[0]:.2f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>14}")
    result = {"msgs_per_s": round(rate), "peak_rss_mb": round(peak_rss_mb, 1)}
    out = (smoke_path("cardinal") if args.smoke else
           None if args.quick else ROOT / "docs" / "bench" / "cardinal.json")
    return finish(result, JSON_KEYS, out)


if __name__ == "__main__":
    raise SystemExit(main())
