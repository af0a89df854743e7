#!/usr/bin/env python3
"""SDS benchmark: 3 in-memory participants exchange N messages round-robin.

Each message is sent by one participant and received by the other two over a perfect link; the
clock advances 1 ms per message and timers run every 100 messages. Two runs:

* unsigned: ``receive`` with id checks but no Ed25519 verification -> ``msgs_per_s``;
* signed: every message signed and every reception verified -> ``msgs_per_s_signed``.

``msgs_per_s`` counts receptions (one message arriving at one participant, fully processed:
decode, id check, acknowledgements, bloom filter, delivery) per CPU second spent in ``receive``
(process CPU time: other jobs share the cores). ``overhead_bytes`` is the mean size of a sent
content message minus its content, at default settings, signed. The JSON figures are over the
whole run; the table adds the median and best of the 5,000-message segments, and a calibration
loop, because the load from other jobs varies.
The last line is the JSON result, also written to docs/bench/sds.json.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT)]

from benchjson import finish, smoke_path  # noqa: E402

from sync.identity import peer_id_of  # noqa: E402
from sync.sds import SdsChannel  # noqa: E402

#: The keys of the JSON result (the smoke contract, docs/bench/README.md).
JSON_KEYS = ("msgs_per_s", "msgs_per_s_signed", "overhead_bytes")
T0 = 1_700_000_000.0
CONTENT_SIZE = 128
SEGMENT = 5_000


def calibrate() -> float:
    """CPU microseconds of a fixed pure-Python loop: how slow this machine is right now."""
    start = time.process_time()
    for _ in range(2_000):
        sum(range(1_000))
    return (time.process_time() - start) / 2_000 * 1e6


def _participants(signed: bool) -> list[SdsChannel]:
    out = []
    for i in range(3):
        if signed:
            key = Ed25519PrivateKey.from_private_bytes(bytes([i + 1]) * 32)
            out.append(SdsChannel("bench", peer_id_of(key), key, None, random.Random(i), T0))
        else:
            out.append(SdsChannel("bench", f"p{i}", None, None, random.Random(i), T0, False))
    return out


def run(n: int, *, signed: bool) -> dict[str, float]:
    chans = _participants(signed)
    rng = random.Random(42)
    send_time = recv_time = 0.0
    receptions = 0
    overhead = 0
    extra = 0
    now = T0
    # CPU time of this process: other jobs share the 2 cores, and wall time would count their
    # turns on the CPU as ours.
    perf = time.process_time
    start = perf()
    segments: list[float] = []
    seg_time = 0.0
    for k in range(n):
        now += 0.001
        src = k % 3
        content = rng.randbytes(CONTENT_SIZE)
        t = perf()
        data = chans[src].send(content, now)
        send_time += perf() - t
        overhead += len(data) - len(content)
        first, second = chans[(src + 1) % 3], chans[(src + 2) % 3]
        t = perf()
        first.receive(data, now)
        second.receive(data, now)
        spent = perf() - t
        recv_time += spent
        seg_time += spent
        receptions += 2
        if k % SEGMENT == SEGMENT - 1:
            segments.append(2 * SEGMENT / seg_time)
            seg_time = 0.0
        if k % 100 == 99:
            for i, ch in enumerate(chans):
                for extra_data in ch.handle_timer(now):
                    extra += 1
                    for dst in range(3):
                        if dst != i:
                            chans[dst].receive(extra_data, now)
            for ch in chans:
                ch.events()
    total = perf() - start
    logs = [ch.layers.log.entries() for ch in chans]
    assert all(log == logs[0] for log in logs) and len(logs[0]) == n, "logs diverged"
    return {
        "messages": n,
        "receptions": receptions,
        "recv_s": recv_time,
        "send_s": send_time,
        "total_s": total,
        "recv_per_s": receptions / recv_time,
        "recv_per_s_median_segment": statistics.median(segments or [receptions / recv_time]),
        "recv_per_s_best_segment": max(segments or [receptions / recv_time]),
        "send_per_s": n / send_time,
        "end_to_end_per_s": n / total,
        "overhead_bytes": overhead / n,
        "extra_datagrams": extra,
        "outgoing_left": sum(len(ch.layers.outgoing.ids) for ch in chans),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 messages instead of 100,000")
    parser.add_argument("--no-write", action="store_true", help="do not write docs/bench/sds.json")
    parser.add_argument("--smoke", action="store_true",
                        help="1,000 messages, JSON to a temp file (the make test smoke run)")
    args = parser.parse_args()
    n = 1_000 if args.smoke else 20_000 if args.quick else 100_000
    load = os.getloadavg()[0]
    calib_before = calibrate()
    plain = run(n, signed=False)
    signed = run(n, signed=True)
    calib_after = calibrate()
    print(
        f"SDS benchmark: 3 participants, {n:,} messages of {CONTENT_SIZE} B; load average "
        f"{load:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
        f"sum(range(1000)) = {calib_before:.1f} / {calib_after:.1f} us CPU"
    )
    print(
        f"{'run':<10}{'recv/s':>10}{'median seg':>12}{'best seg':>10}{'send/s':>9}"
        f"{'e2e msg/s':>11}{'overhead B':>12}{'extra dgrams':>14}{'unacked':>9}"
    )
    for name, r in (("unsigned", plain), ("signed", signed)):
        print(
            f"{name:<10}{r['recv_per_s']:>10,.0f}{r['recv_per_s_median_segment']:>12,.0f}"
            f"{r['recv_per_s_best_segment']:>10,.0f}{r['send_per_s']:>9,.0f}"
            f"{r['end_to_end_per_s']:>11,.0f}{r['overhead_bytes']:>12,.1f}"
            f"{r['extra_datagrams']:>14,}{r['outgoing_left']:>9,}"
        )
    result = {
        "msgs_per_s": round(plain["recv_per_s"]),
        "msgs_per_s_signed": round(signed["recv_per_s"]),
        "overhead_bytes": round(signed["overhead_bytes"], 1),
    }
    out = (smoke_path("sds") if args.smoke else
           None if args.no_write else ROOT / "docs" / "bench" / "sds.json")
    return finish(result, JSON_KEYS, out)


if __name__ == "__main__":
    raise SystemExit(main())
