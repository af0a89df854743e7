"""A debug hook to find what grows in a node's memory: with ``SYNCNODE_MEMTRACE_DIR`` set, the
node writes, every ``SYNCNODE_MEMTRACE_S`` seconds (default 60), ``gc-<seconds>.json`` (live
objects per type, from ``gc``), ``mem-<seconds>.json`` (the process's resident memory, what
SQLite's allocator holds, and glibc's heap: in use, free but kept, mmapped) and, when
``tracemalloc`` is tracing (``PYTHONTRACEMALLOC=N`` in the environment), ``tm-<seconds>.snap``
(a snapshot ``tracemalloc.Snapshot.load`` reads).
``scripts/bench/steady_rss_bench.py --memtrace DIR`` starts nodes with it and
``scripts/bench/memtrace_diff.py`` compares the files over time.
Off (no task at all) unless the variable is set: it costs a full ``gc`` walk per sample.
"""

from __future__ import annotations

import _sqlite3
import ctypes
import gc
import json
import os
import tracemalloc
from collections import Counter
from pathlib import Path

import trio

from node.clock import Clock

__all__ = ["DIR_ENV", "PERIOD_ENV", "MemTrace", "memtrace_from_env"]

DIR_ENV = "SYNCNODE_MEMTRACE_DIR"
PERIOD_ENV = "SYNCNODE_MEMTRACE_S"


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _memory() -> dict[str, float]:
    """MiB: resident, SQLite's allocator (page caches, statements: every connection), glibc's
    heap in use, free but kept, and mmapped (large blocks); Python's own small-object arenas
    are the rest of the resident memory."""
    mib = float(1 << 20)
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    out = {"rss": pages * os.sysconf("SC_PAGE_SIZE") / mib}
    sqlite_used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
    sqlite_used.restype = ctypes.c_int64
    out["sqlite"] = sqlite_used() / mib
    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    out.update(malloc_in_use=info.uordblks / mib, malloc_free=info.fordblks / mib,
               malloc_mmapped=info.hblkhd / mib)
    if tracemalloc.is_tracing():
        out["python_traced"] = tracemalloc.get_traced_memory()[0] / mib
    return out


def _type_counts() -> dict[str, int]:
    counts = Counter(type(o).__qualname__ for o in gc.get_objects())
    return dict(counts.most_common(300))


class MemTrace:
    """Writes the samples into ``directory`` every ``period_s`` seconds, each named by the
    node's wall clock (``clock.wall``)."""

    def __init__(self, directory: Path, period_s: float, clock: Clock) -> None:
        self.directory, self.period_s, self.clock = directory, period_s, clock

    def sample(self, stamp: int | None = None) -> None:
        """Write one sample now, named by ``stamp`` (default: seconds since the epoch)."""
        stamp = int(self.clock.wall()) if stamp is None else stamp
        (self.directory / f"mem-{stamp}.json").write_text(json.dumps(_memory()))
        (self.directory / f"gc-{stamp}.json").write_text(json.dumps(_type_counts()))
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(self.directory / f"tm-{stamp}.snap"))

    async def run(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            self.sample()
            await trio.sleep(self.period_s)


def memtrace_from_env(clock: Clock) -> MemTrace | None:
    """The hook if ``SYNCNODE_MEMTRACE_DIR`` names a directory, else None."""
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return None
    return MemTrace(Path(directory), float(os.environ.get(PERIOD_ENV, "60")), clock)
