"""The memory slope the RSS benchmarks report: a least-squares fit of resident memory over time."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["slope_mib_per_h"]


def slope_mib_per_h(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of (seconds, MiB) points, in MiB per hour; None under 3 points."""
    if len(points) < 3:
        return None
    fit = statistics.linear_regression([t for t, _ in points], [v for _, v in points])
    return fit.slope * 3600
