"""A node's metrics, exposed through ``prometheus_client`` (the Prometheus project's library).

Each :class:`Metrics` owns a ``CollectorRegistry`` (tests run several nodes in one process; the
library's global default registry would mix their series) holding two collectors: the library's
``ProcessCollector`` for the standard ``process_*`` series (CPU, memory, file descriptors, start
time), and :class:`_Families`, which hands
the node's series to the library as metric families at each scrape. The library does the
exposition: float formatting (``le="0.0025"``, ``0.1``), escaping, HELP and TYPE lines.

The values themselves live here, in plain cells, because the per-event paths call ``inc`` and
``observe`` several times per event: the library's own ``Counter``/``Histogram`` objects take a
lock and validate on every call, which made ``inc`` 25-30 % and ``set`` twice as slow
(scripts/bench/metrics_bench.py). This is the library's documented pattern for values kept
elsewhere (a custom collector), and each series sits in one cell under its sorted label set, so
a series appears once however its labels were ordered.

Callers use a string-keyed API (``inc``, ``set``, ``observe``, ``describe``); a family is made on
its first use. Conventions Prometheus users expect hold here so callers cannot get them wrong:
counters end in ``_total``; a labelled family with no series yet shows only its HELP and TYPE
lines; a name is one kind (a histogram cannot also be ``inc``-ed) and a computed series
(``gauge_fn``, ``counter_fn``) cannot also be set.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["DEFAULT_BUCKETS", "Metrics"]

# Seconds, from a millisecond local commit up to a Recon session near its timeout.
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)

KINDS = ("counter", "gauge", "histogram")

LabelKey = tuple[tuple[str, str], ...]


class _Histogram:
    """One histogram series: a count per bucket (not cumulative; the scrape sums) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0


class _Family:
    """A name's kind, help text and series (label set -> cell)."""

    __slots__ = ("bounds", "help", "histograms", "kind", "les", "values")

    def __init__(self, kind: str, help_text: str, buckets: Sequence[float]) -> None:
        self.kind = kind
        self.help = help_text
        self.bounds = (*sorted(float(b) for b in buckets if b != float("inf")), float("inf"))
        # The library's spelling of each bound ("0.0025", "+Inf"); the function is untyped.
        self.les: tuple[str, ...] = tuple(floatToGoString(b)  # type: ignore[no-untyped-call]
                                          for b in self.bounds)
        self.values: dict[LabelKey, list[float]] = {}
        self.histograms: dict[LabelKey, _Histogram] = {}

    def metric(self, full: str) -> Metric:
        """This family as the library's ``Metric`` (its samples, in label order)."""
        metric = Metric(full.removesuffix("_total") if self.kind == "counter" else full,
                        self.help, self.kind)
        for key, cell in sorted(self.values.items()):
            metric.add_sample(full, dict(key), cell[0])
        for key, series in sorted(self.histograms.items()):
            labels, running = dict(key), 0
            for le, count in zip(self.les, series.counts, strict=True):
                running += count
                metric.add_sample(full + "_bucket", {**labels, "le": le}, running)
            metric.add_sample(full + "_sum", labels, series.sum)
            metric.add_sample(full + "_count", labels, running)
        return metric


class _Process(Collector):
    """The library's ``ProcessCollector``, with the CPU time rounded to the microsecond: it sums
    user and system clock ticks as floats, which prints ``1.6099999999999999`` for 1.61 s."""

    def __init__(self) -> None:
        self.inner = ProcessCollector(registry=None)

    def collect(self) -> Iterable[Metric]:
        for metric in self.inner.collect():
            if metric.name == "process_cpu_seconds":
                metric.samples = [s._replace(value=round(s.value, 6)) for s in metric.samples]
            yield metric


def _default_kind(name: str) -> str:
    return "counter" if name.endswith("_total") else "gauge"


class _Families(Collector):
    """What the registry collects of a :class:`Metrics`: every family by name, computed ones
    read now."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        m = self.metrics
        for name in m.names():
            family = m.family(name)
            metric = family.metric(m.prefix + name)
            fn = m._fns.get(name)
            if fn is not None:
                metric.add_sample(m.prefix + name, {}, fn())
            yield metric


class Metrics:
    """A node's registry: ``inc`` counters, ``set`` gauges, ``observe`` histograms, and computed
    series (``gauge_fn``, ``counter_fn``) read at each scrape."""

    def __init__(self, prefix: str = "syncnode_") -> None:
        self.prefix = prefix
        self.registry = CollectorRegistry(auto_describe=False)
        self._families: dict[str, _Family] = {}
        # The hot path's cache: ``name`` or ``(name, *label items)`` in the caller's order -> the
        # series' cell, so that a known series costs one dict lookup and no sort.
        self._cells: dict[object, list[float]] = {}
        self._histograms: dict[object, _Histogram] = {}
        self._fns: dict[str, Callable[[], float]] = {}
        self.registry.register(_Families(self))
        self.registry.register(_Process())

    # -- declaring ------------------------------------------------------------------------

    def describe(self, name: str, kind: str, help_text: str) -> None:
        self._declare(name, kind, help_text, DEFAULT_BUCKETS)

    def describe_histogram(self, name: str, help_text: str,
                           buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self._declare(name, "histogram", help_text, buckets)

    def gauge_fn(self, name: str, fn: Callable[[], float], help_text: str) -> None:
        self._computed(name, "gauge", fn, help_text)

    def counter_fn(self, name: str, fn: Callable[[], float], help_text: str) -> None:
        self._computed(name, "counter", fn, help_text)

    def _declare(self, name: str, kind: str, help_text: str, buckets: Sequence[float]) -> None:
        if kind not in KINDS:
            raise ValueError(f"metric {name}: unknown kind {kind!r}")
        if kind == "counter" and not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        family = self._families.get(name)
        if family is None:
            self._families[name] = _Family(kind, help_text, buckets)
        elif family.kind != kind:
            raise ValueError(f"metric {name} is a {family.kind}, not a {kind}")
        else:
            family.help = help_text

    def _computed(self, name: str, kind: str, fn: Callable[[], float], help_text: str) -> None:
        family = self._families.get(name)
        if family is not None and (family.values or family.histograms):
            raise ValueError(f"metric {name} already has series; it cannot also be computed")
        self._declare(name, kind, help_text, DEFAULT_BUCKETS)
        self._fns[name] = fn

    def family(self, name: str, use: str = "gauge") -> _Family:
        """``name``'s family; made, undescribed, with the kind its first ``use`` implies."""
        family = self._families.get(name)
        if family is None:
            kind = "histogram" if use == "histogram" else _default_kind(name)
            family = self._families[name] = _Family(kind, name.replace("_", " "),
                                                    DEFAULT_BUCKETS)
        return family

    # -- the hot path ---------------------------------------------------------------------

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        key = (name, *labels.items()) if labels else name
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cell(key, name, labels)
        cell[0] += amount

    def set(self, name: str, value: float, **labels: str) -> None:
        key = (name, *labels.items()) if labels else name
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cell(key, name, labels)
        cell[0] = value

    def observe(self, name: str, value: float, **labels: str) -> None:
        key = (name, *labels.items()) if labels else name
        series = self._histograms.get(key)
        if series is None:
            series = self._histogram(key, name, labels)
        # bisect_left: the first bound >= value, i.e. the smallest bucket with value <= le.
        series.counts[bisect_left(series.bounds, value)] += 1
        series.sum += value

    def _cell(self, key: object, name: str, labels: dict[str, str]) -> list[float]:
        family = self.family(name)
        if family.kind == "histogram" or name in self._fns:
            computed = " computed at each scrape" if name in self._fns else ""
            raise ValueError(f"metric {name} is a {family.kind}{computed}; it takes no inc or set")
        cell = family.values.setdefault(_label_key(labels), [0.0])
        self._cells[key] = cell
        return cell

    def _histogram(self, key: object, name: str, labels: dict[str, str]) -> _Histogram:
        family = self.family(name, "histogram")
        if family.kind != "histogram":
            raise ValueError(f"metric {name} is a {family.kind}; it takes no observe")
        series = family.histograms.setdefault(_label_key(labels), _Histogram(family.bounds))
        self._histograms[key] = series
        return series

    def clear(self, name: str) -> None:
        """Drop every series of ``name`` (a per-peer gauge whose label set is replaced)."""
        family = self._families.get(name)
        if family is None:
            return
        family.values.clear()
        family.histograms.clear()
        for cache in (self._cells, self._histograms):
            # list(): one atomic copy (application threads may add series meanwhile).
            stale = [k for k in list(cache)
                     if k == name or (isinstance(k, tuple) and k[0] == name)]
            for key in stale:
                del cache[key]

    # -- reading --------------------------------------------------------------------------

    def value(self, name: str, **labels: str) -> float:
        """One series' value (a histogram's observation count); 0 for one not seen yet."""
        fn = self._fns.get(name)
        if fn is not None:
            return fn()
        family = self._families.get(name)
        if family is None:
            return 0.0
        key = _label_key(labels)
        if key in family.histograms:
            return float(sum(family.histograms[key].counts))
        cell = family.values.get(key)
        return cell[0] if cell is not None else 0.0

    def total(self, name: str) -> float:
        """The sum over every label set of a counter (what a test that drives it checks)."""
        family = self._families.get(name)
        return sum(cell[0] for cell in family.values.values()) if family is not None else 0.0

    def names(self) -> list[str]:
        return sorted(self._families)

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of every series, process_* included."""
        return generate_latest(self.registry).decode()


def _label_key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))
