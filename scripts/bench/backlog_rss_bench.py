#!/usr/bin/env python3
"""Own-backlog memory benchmark (issue 31): the peak resident memory of a node holding 200
unacknowledged 500 KB events of its own (``scripts/bench/backlog_rss.py`` has the
measurement). Target: ``own_backlog_peak_rss_mib`` <= 512.

Keys: ``own_backlog_peak_rss_mib``, ``own_backlog_idle_rss_mib`` (the node before publishing),
``own_backlog_end_rss_mib`` (at the end of the hold), ``own_backlog_state_bytes`` (the saved
channel state at shutdown), ``own_backlog_events``, ``own_backlog_event_bytes``,
``own_backlog_publish_s``, ``own_backlog_load``. The last line is the JSON, also written to
docs/bench/backlog_rss.json (with ``--smoke``: 10 events of 50 KB, a temporary file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from backlog_rss import run  # noqa: E402
from benchjson import finish, smoke_path  # noqa: E402

JSON_KEYS = (
    "own_backlog_peak_rss_mib",
    "own_backlog_idle_rss_mib",
    "own_backlog_end_rss_mib",
    "own_backlog_state_bytes",
    "own_backlog_events",
    "own_backlog_event_bytes",
    "own_backlog_publish_s",
    "own_backlog_load",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="10 events of 50 KB, seconds")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--size", type=int, default=500_000)
    parser.add_argument("--hold", type=float, default=25.0)
    parser.add_argument("--config", type=Path, help="a node config file (experiments)")
    args = parser.parse_args()
    toml = args.config.read_text() if args.config else ""
    if args.smoke:
        result = run(events=10, size=50_000, hold_s=1.0)  # every figure; the held ones tiny
        out = smoke_path("backlog_rss")
    else:
        result = run(events=args.events, size=args.size, hold_s=args.hold, config_toml=toml)
        out = ROOT / "docs" / "bench" / "backlog_rss.json"
    print(f"{'figure':<28} value")
    for key in JSON_KEYS:
        print(f"{key:<28} {result[key]}")
    return finish(result, JSON_KEYS, out)


if __name__ == "__main__":
    sys.exit(main())
