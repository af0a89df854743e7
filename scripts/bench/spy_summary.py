#!/usr/bin/env python3
"""Summarise a py-spy ``record -f raw`` profile: where the samples go.

Usage: ``spy_summary.py PROFILE.txt [--top N] [--match SUBSTRING ...]``

Prints the share of samples per function *inclusive* (the function is anywhere on the stack)
and *self* (the function is the leaf), and for each ``--match`` the inclusive share of stacks
containing a frame with that substring. Idle samples (trio waiting in ``epoll``/``select``)
are counted separately so that the shares are of busy time.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_IDLE = ("get_events (trio/_core/_io_epoll.py", "EpollIOManager.get_events", "select.epoll",
         "_thread.lock.acquire", "wait (threading.py", "_worker (trio/_core/_thread_cache.py")
_FRAME = re.compile(r"^(?P<name>.+?) \((?P<file>[^:]+)(?::\d+)?\)$")


def _frame_name(frame: str) -> str:
    match = _FRAME.match(frame)
    if not match:
        return frame
    return f"{match['name']} ({match['file']})"


def summarise(path: Path, top: int, matches: list[str]) -> str:
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    matched: Counter[str] = Counter()
    total = idle = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        if any(marker in frames[-1] for marker in _IDLE):
            idle += count
            continue
        names = [_frame_name(f) for f in frames]
        for name in set(names):
            inclusive[name] += count
        leaf[names[-1]] += count
        for needle in matches:
            if any(needle in f for f in frames):
                matched[needle] += count
    busy = max(total - idle, 1)
    out = [f"{path.name}: {total} samples, {idle} idle ({100 * idle / max(total, 1):.0f}%), "
           f"{total - idle} busy; shares below are of busy samples"]
    for needle in matches:
        out.append(f"  match {needle!r}: {100 * matched[needle] / busy:5.1f}%")
    out.append("  inclusive:")
    out += [f"    {100 * n / busy:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    out.append("  self:")
    out += [f"    {100 * n / busy:5.1f}%  {name}" for name, n in leaf.most_common(top)]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", action="append", default=[])
    args = parser.parse_args()
    print(summarise(args.profile, args.top, args.match))


if __name__ == "__main__":
    main()
