"""Counters, gauges and histograms rendered in the Prometheus text exposition format.

Conventions Prometheus users expect, kept here so that callers cannot get them wrong:
counters end in ``_total`` and are typed ``counter``; a labelled metric with no observation yet
shows only its HELP and TYPE lines (no placeholder series); the standard ``process_*`` series
(CPU, memory, file descriptors, start time) come without the ``syncnode_`` prefix.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

__all__ = ["DEFAULT_BUCKETS", "Metrics", "process_metrics"]

LabelKey = tuple[tuple[str, str], ...]

# Seconds, from a millisecond local commit up to a Recon session near its timeout.
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(key: LabelKey) -> str:
    if not key:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in key) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.17g}" if isinstance(value, float) and not value.is_integer() else f"{value:g}"


class _Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(sorted(buckets))
        self.series: dict[LabelKey, tuple[list[int], list[float]]] = {}

    def observe(self, key: LabelKey, value: float) -> None:
        counts, sums = self.series.setdefault(key, ([0] * (len(self.buckets) + 1), [0.0]))
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                counts[i] += 1
        counts[-1] += 1
        sums[0] += value

    def render(self, full: str) -> list[str]:
        lines = []
        for key, (counts, sums) in sorted(self.series.items()):
            for bound, count in zip((*self.buckets, math.inf), counts, strict=True):
                le = (*key, ("le", _number(bound)))
                lines.append(f"{full}_bucket{_labels(le)} {count}")
            lines.append(f"{full}_sum{_labels(key)} {_number(sums[0])}")
            lines.append(f"{full}_count{_labels(key)} {counts[-1]}")
        return lines


class Metrics:
    """A small registry: ``inc`` counters, ``set`` gauges, ``observe`` histograms, and computed
    series (``gauge_fn``, ``counter_fn``) read at each scrape."""

    def __init__(self, prefix: str = "syncnode_") -> None:
        self.prefix = prefix
        self._help: dict[str, tuple[str, str]] = {}
        self._values: dict[str, dict[LabelKey, float]] = defaultdict(dict)
        self._fns: dict[str, Callable[[], float]] = {}
        self._histograms: dict[str, _Histogram] = {}

    def describe(self, name: str, kind: str, help_text: str) -> None:
        self._help[name] = (kind, help_text)

    def describe_histogram(self, name: str, help_text: str,
                           buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self._help[name] = ("histogram", help_text)
        self._histograms.setdefault(name, _Histogram(buckets))

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        series = self._values[name]
        series[key] = series.get(key, 0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        self._values[name][tuple(sorted(labels.items()))] = value

    def clear(self, name: str) -> None:
        """Drop every series of ``name`` (a per-peer gauge whose label set is replaced)."""
        self._values.pop(name, None)

    def observe(self, name: str, value: float, **labels: str) -> None:
        histogram = self._histograms.get(name)
        if histogram is None:
            histogram = self._histograms[name] = _Histogram(DEFAULT_BUCKETS)
        histogram.observe(tuple(sorted(labels.items())), value)

    def gauge_fn(self, name: str, fn: Callable[[], float], help_text: str) -> None:
        self.describe(name, "gauge", help_text)
        self._fns[name] = fn

    def counter_fn(self, name: str, fn: Callable[[], float], help_text: str) -> None:
        self.describe(name, "counter", help_text)
        self._fns[name] = fn

    def value(self, name: str, **labels: str) -> float:
        if name in self._fns:
            return self._fns[name]()
        if name in self._histograms:
            series = self._histograms[name].series.get(tuple(sorted(labels.items())))
            return float(series[0][-1]) if series else 0.0
        return self._values.get(name, {}).get(tuple(sorted(labels.items())), 0)

    def total(self, name: str) -> float:
        """The sum over every label set of a counter (what a test that drives it checks)."""
        return sum(self._values.get(name, {}).values())

    def names(self) -> list[str]:
        return sorted(set(self._help) | set(self._values) | set(self._fns) | set(self._histograms))

    def render(self) -> str:
        lines: list[str] = []
        for name in self.names():
            kind, help_text = self._help.get(
                name, ("counter" if name.endswith("_total") else "gauge", name.replace("_", " "))
            )
            full = self.prefix + name
            lines.append(f"# HELP {full} {help_text}")
            lines.append(f"# TYPE {full} {kind}")
            if name in self._fns:
                lines.append(f"{full} {_number(self._fns[name]())}")
            elif name in self._histograms:
                lines.extend(self._histograms[name].render(full))
            else:
                for key, value in sorted(self._values.get(name, {}).items()):
                    lines.append(f"{full}{_labels(key)} {_number(value)}")
        lines.extend(process_metrics())
        return "\n".join(lines) + "\n"


_STARTED = time.time()


def _proc_status_bytes(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _process_start() -> float:
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            ticks = float(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as system:
            boot = next(float(line.split()[1]) for line in system if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        return _STARTED


_START_TIME = _process_start()


def process_metrics() -> list[str]:
    """The standard ``process_*`` series of the Prometheus client libraries, for this process."""
    times = os.times()
    values: list[tuple[str, str, str, float | None]] = [
        ("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds",
         times.user + times.system),
        ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes",
         _proc_status_bytes("VmRSS")),
        ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes",
         _proc_status_bytes("VmSize")),
        ("process_start_time_seconds", "gauge",
         "Start time of the process since the Unix epoch, in seconds", _START_TIME),
    ]
    with contextlib.suppress(OSError):
        values.append(("process_open_fds", "gauge", "Number of open file descriptors",
                       float(len(os.listdir("/proc/self/fd")))))
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    values.append(("process_max_fds", "gauge", "Maximum number of open file descriptors",
                   float(soft) if soft != resource.RLIM_INFINITY else None))
    lines = []
    for name, kind, help_text, value in values:
        if value is None:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {_number(value)}"]
    return lines


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))
