#!/usr/bin/env python3
"""Restart benchmark: start-up time and memory of a node whose database holds a long log.

For each size (1,000,000 and 5,000,000 events; 100,000 and 500,000 with ``--quick``) a log of
real signed SDS events (4 authors, each naming its previous event, as ``SdsChannel.send`` would
with no other author heard) is written straight into a node database, then ``syncnode run``
is started on it twice. The first start finds no saved Recon key store summary (any saved
one is deleted first) and scans every key (``scan_start_s``: a first start after the upgrade,
or after a fallback); its clean shutdown saves the summary. The second is the normal restart:
the saved summary plus the keys above its watermark (``restart_s``). Each time is from spawning
the process to its API answering; ``rss_mib`` is the restarted node's resident memory then
(VmRSS; VmHWM, the peak, is printed too). What must hold: start-up time and memory independent
of the log's length (the largest size within 1.2x of the smallest).

Keys: ``restart_s_1m``, ``rss_mib_1m``, ``restart_s_5m``, ``rss_mib_5m``, ``scan_start_s_1m``,
``scan_start_s_5m`` and the key store's outcome of each restart, ``restart_outcome_*`` (with
``--quick``: ``_100k`` and ``_500k``). The last line is the JSON, also written to
docs/bench/restart.json (not with ``--quick``).

``--data DIR`` keeps the built databases in DIR (outside the repository) and reuses them; with
``--build-budget-s S`` a build stops after S seconds and the next run resumes it (5,000,000
signed events take longer than one 12-minute slot of the shared lock on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from benchjson import finish, smoke_path  # noqa: E402
from catchup_log import node_database  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from sqlalchemy import inspect, select, text  # noqa: E402

from storage import count_events, event_row, events, insert_rows  # noqa: E402
from sync.identity import peer_id_of  # noqa: E402
from sync.sds import HistoryRef, encode_event  # noqa: E402
from sync.stored_event import record_of_event  # noqa: E402
from tests.harness.procs import NodeProcess  # noqa: E402

OUT = ROOT / "docs" / "bench" / "restart.json"
CHANNEL = "general"
T0_MS = 1_700_000_000_000
CHUNK = 20_000
FULL_SIZES = ((1_000_000, "1m"), (5_000_000, "5m"))
QUICK_SIZES = ((100_000, "100k"), (500_000, "500k"))
SMOKE_SIZES = ((1_000, "1k"), (4_000, "4k"))
#: Keys of the JSON result at every size (the smoke contract, docs/bench/README.md); per size
#: ``TAGGED_KEYS`` with its tag appended (``restart_s_1m``, ...).
JSON_KEYS = ("quick", "load_avg_1m", "rss_ratio")
TAGGED_KEYS = ("scan_start_s", "restart_s", "restart_outcome", "rss_mib", "peak_rss_mib")


def build(data_dir: Path, count: int, senders: int = 4, budget_s: float = 1e9) -> float:
    """Write ``count`` events into ``data_dir``'s database; returns the seconds it took.

    Resumes a database built partly before (the log is deterministic); stops after
    ``budget_s`` (the database then holds fewer than ``count`` events).
    """
    started = time.monotonic()
    engine = node_database(data_dir)
    try:
        rng = random.Random(7)
        keys = [Ed25519PrivateKey.from_private_bytes(rng.randbytes(32)) for _ in range(senders)]
        ids = [peer_id_of(k) for k in keys]
        previous: list[tuple[HistoryRef, ...]] = [() for _ in keys]
        with engine.connect() as conn:
            done = count_events(conn)
            for i, sender in enumerate(ids):
                last = conn.execute(select(events.c.message_id).where(events.c.sender == sender)
                                    .order_by(events.c.seq.desc()).limit(1)).scalar()
                if last is not None:
                    previous[i] = (HistoryRef(last, None, sender),)
        rows: list[dict[str, object]] = []
        for n in range(done, count):
            if n % CHUNK == 0 and time.monotonic() - started > budget_s:
                break
            i = n % senders
            event = encode_event(CHANNEL, ids[i], T0_MS + n, previous[i],
                                 f"restart {n} ".encode().ljust(64, b"."), keys[i])
            previous[i] = (HistoryRef(event.message_id, None, ids[i]),)
            rows.append(event_row(record_of_event(1, event), T0_MS))
            if len(rows) >= CHUNK or n == count - 1:
                with engine.begin() as conn:
                    insert_rows(conn, rows)
                rows = []
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        engine.dispose()
    return time.monotonic() - started


def memory_mib(node: NodeProcess) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a node process, in MiB."""
    assert node.proc is not None
    values = {}
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def forget_summary(data_dir: Path) -> None:
    """Delete a saved key store summary (a run before this one saved it)."""
    engine = node_database(data_dir)
    try:
        if inspect(engine).has_table("recon_summary"):
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM recon_summary"))
    finally:
        engine.dispose()


def measure(data_dir: Path) -> tuple[float, float, float, str]:
    """(seconds to start, VmRSS, VmHWM, the key store's outcome) of one start-up."""
    node = NodeProcess(data_dir)
    started = time.monotonic()
    node.start(timeout=1800)
    seconds = time.monotonic() - started
    try:
        rss, peak = memory_mib(node)
    finally:
        node.terminate(timeout=120)
    loads = re.findall(r"recon key store loaded.*?outcome=(\w+)", node.stderr_path.read_text())
    return seconds, rss, peak, loads[-1] if loads else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 and 500,000 events")
    parser.add_argument("--data", type=Path, help="keep (and reuse) the databases here")
    parser.add_argument("--build-budget-s", type=float, default=1e9,
                        help="stop building after this long; the next run resumes")
    parser.add_argument("--smoke", action="store_true",
                        help="1,000 and 4,000 events side by side, JSON to a temp file (make test)")
    args = parser.parse_args()
    sizes = SMOKE_SIZES if args.smoke else QUICK_SIZES if args.quick else FULL_SIZES
    base = args.data or Path(tempfile.mkdtemp(prefix="syncnode-restart-bench-"))
    result: dict[str, object] = {"quick": args.quick,
                                 "load_avg_1m": [round(os.getloadavg()[0], 2)]}
    print(f"restart benchmark: {os.cpu_count()} cores, work dir {base}")
    print(f"{'events':>10} {'build s':>8} {'scan s':>7} {'restart s':>10} {'RSS MiB':>8} "
          f"{'peak MiB':>9} outcome")
    def one_size(count: int, tag: str) -> bool:
        """Build, then time the scan start and the restart at one size (False: not built)."""
        data_dir = base / tag
        built = build(data_dir, count, budget_s=args.build_budget_s)
        with node_database(data_dir).connect() as conn:
            stored = count_events(conn)
        if stored < count:
            print(f"{tag}: {stored} of {count} events built; run again to resume")
            return False
        forget_summary(data_dir)
        scan_s, _, _, first = measure(data_dir)
        seconds, rss, peak, outcome = measure(data_dir)
        print(f"{count:>10} {built:>8.1f} {scan_s:>7.2f} {seconds:>10.2f} {rss:>8.1f} "
              f"{peak:>9.1f} {first} -> {outcome}", flush=True)
        result[f"scan_start_s_{tag}"] = round(scan_s, 2)
        result[f"restart_s_{tag}"] = round(seconds, 2)
        result[f"restart_outcome_{tag}"] = outcome
        result[f"rss_mib_{tag}"] = round(rss, 1)
        result[f"peak_rss_mib_{tag}"] = round(peak, 1)
        if args.data is None:
            shutil.rmtree(data_dir, ignore_errors=True)
        return True

    try:
        if args.smoke:
            # The smoke runs both sizes side by side (its figures are not judged); the others
            # one after the other, each start alone on the machine.
            with ThreadPoolExecutor(len(sizes)) as pool:
                built_all = all(list(pool.map(lambda size: one_size(*size), sizes)))
        else:
            built_all = all(one_size(count, tag) for count, tag in sizes)
        if not built_all:
            return 1
    finally:
        if args.data is None:
            shutil.rmtree(base, ignore_errors=True)
    small, large = (tag for _, tag in sizes)
    ratio = float(result[f"rss_mib_{large}"]) / float(result[f"rss_mib_{small}"])  # type: ignore[arg-type]
    result["rss_ratio"] = round(ratio, 3)
    result["load_avg_1m"] = [*result["load_avg_1m"], round(os.getloadavg()[0], 2)]  # type: ignore[misc]
    print(f"RSS {large} / {small}: {ratio:.2f}x (target <= 1.2x)")
    out = smoke_path("restart") if args.smoke else None if args.quick else OUT
    keys = [*JSON_KEYS, *(f"{key}_{tag}" for key in TAGGED_KEYS for _, tag in sizes)]
    return finish(result, keys, out)


if __name__ == "__main__":
    sys.exit(main())
