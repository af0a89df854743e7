"""Counters and gauges rendered in the Prometheus text exposition format."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

__all__ = ["Metrics"]

LabelKey = tuple[tuple[str, str], ...]


def _labels(key: LabelKey) -> str:
    if not key:
        return ""
    body = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in key
    )
    return "{" + body + "}"


class Metrics:
    """A small registry: ``inc`` counters, ``set`` gauges, ``gauge_fn`` computed gauges."""

    def __init__(self, prefix: str = "syncnode_") -> None:
        self.prefix = prefix
        self._help: dict[str, tuple[str, str]] = {}
        self._values: dict[str, dict[LabelKey, float]] = defaultdict(dict)
        self._fns: dict[str, Callable[[], float]] = {}

    def describe(self, name: str, kind: str, help_text: str) -> None:
        self._help[name] = (kind, help_text)

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        series = self._values[name]
        series[key] = series.get(key, 0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        self._values[name][tuple(sorted(labels.items()))] = value

    def gauge_fn(self, name: str, fn: Callable[[], float], help_text: str) -> None:
        self.describe(name, "gauge", help_text)
        self._fns[name] = fn

    def value(self, name: str, **labels: str) -> float:
        if name in self._fns:
            return self._fns[name]()
        return self._values.get(name, {}).get(tuple(sorted(labels.items())), 0)

    def render(self) -> str:
        lines: list[str] = []
        for name in sorted(set(self._help) | set(self._values) | set(self._fns)):
            kind, help_text = self._help.get(name, ("counter", name))
            full = self.prefix + name
            lines.append(f"# HELP {full} {help_text}")
            lines.append(f"# TYPE {full} {kind}")
            if name in self._fns:
                lines.append(f"{full} {self._fns[name]()}")
                continue
            series = self._values.get(name) or {(): 0}
            for key, value in sorted(series.items()):
                lines.append(f"{full}{_labels(key)} {value:g}")
        return "\n".join(lines) + "\n"
