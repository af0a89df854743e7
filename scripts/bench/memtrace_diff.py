#!/usr/bin/env python3
"""What grew in a node's memory between two samples of the debug hook
(node/telemetry/memtrace.py; ``steady_rss_bench.py --memtrace DIR`` writes them): the
allocation sites (tracemalloc, by ``--group``: lineno, filename or traceback) and the object
types (gc) that grew most from the sample nearest ``--since`` seconds after the first to the
last, each with its size at every sample, so a plateau shows apart from a leak.

    memtrace_diff.py DIR/n0 [--since 120] [--top 25] [--group lineno]
"""

from __future__ import annotations

import argparse
import json
import sys
import tracemalloc
from pathlib import Path

KIB = 1024


def _stamp(path: Path) -> int:
    return int(path.stem.split("-")[1])


def _pick(paths: list[Path], since_s: float) -> list[Path]:
    start = _stamp(paths[0]) + since_s
    return [p for p in paths if _stamp(p) >= start] or paths[-1:]


def allocations(directory: Path, since_s: float, top: int, group: str) -> None:
    paths = _pick(sorted(directory.glob("tm-*.snap"), key=_stamp), since_s)
    if len(paths) < 2:
        print("fewer than 2 tracemalloc samples")
        return
    snaps = [tracemalloc.Snapshot.load(str(p)) for p in paths]
    snaps = [s.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)]) for s in snaps]
    totals = [sum(t.size for t in s.statistics("filename")) / KIB / KIB for s in snaps]
    ages = [_stamp(p) - _stamp(paths[0]) for p in paths]
    print(f"traced MiB at each sample ({len(snaps)}, s after the first kept): "
          + "  ".join(f"{age}s {t:.1f}" for age, t in zip(ages, totals, strict=True)))
    by_site = [{st.traceback: st.size for st in s.statistics(group)} for s in snaps]
    grown = snaps[-1].compare_to(snaps[0], group)[:top]
    for diff in grown:
        frames = diff.traceback.format()[-12 if group == "traceback" else -2:]
        curve = " ".join(f"{d.get(diff.traceback, 0) / KIB:.0f}" for d in by_site)
        print(f"{diff.size_diff / KIB:+9.0f} KiB {diff.count_diff:+8d} blocks  KiB: {curve}")
        for line in frames:
            print("      " + line.strip())


def memory(directory: Path) -> None:
    """The process's memory by owner at every sample (MiB)."""
    paths = sorted(directory.glob("mem-*.json"), key=_stamp)
    for path in paths:
        parts = json.loads(path.read_text())
        print(f"{_stamp(path) - _stamp(paths[0]):5d}s " + "  ".join(
            f"{name} {value:.1f}" for name, value in parts.items()))


def objects(directory: Path, since_s: float, top: int) -> None:
    paths = _pick(sorted(directory.glob("gc-*.json"), key=_stamp), since_s)
    counts = [json.loads(p.read_text()) for p in paths]
    first, last = counts[0], counts[-1]
    grown = sorted(last, key=lambda k: first.get(k, 0) - last[k])[:top]
    print(f"gc objects: {sum(first.values())} -> {sum(last.values())}")
    for name in grown:
        curve = " ".join(str(c.get(name, 0)) for c in counts)
        print(f"{last[name] - first.get(name, 0):+8d}  {name:<32} {curve}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--since", type=float, default=120.0, help="seconds after the first")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--group", default="lineno", choices=("lineno", "filename", "traceback"))
    args = parser.parse_args()
    memory(args.directory)
    objects(args.directory, args.since, args.top)
    allocations(args.directory, args.since, args.top, args.group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
