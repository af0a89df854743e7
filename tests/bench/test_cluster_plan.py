"""The cluster benchmark's quick plan climbs until a step fails (issue 40's note on the measure).

A quick plan capped below both clusters' limits had both pass its top step, so its
``rate_per_s`` / ``raw_gossipsub_rate_per_s`` ratio read 1.0x whatever the code did. These run
the plan's own ``Ramp`` against systems of known capacity (a step passes when its target is at
most the capacity), without starting any process.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path[:0] = [str(ROOT / "scripts" / "bench")]
    try:
        return importlib.import_module("cluster_bench")
    finally:
        sys.path.remove(str(ROOT / "scripts" / "bench"))


def climb(bench: ModuleType, plan: object, capacity: float) -> object:
    ramp = bench.Ramp(plan)
    while not ramp.done:
        target = ramp.rate
        ok = target <= capacity
        n = max(1, int(target * plan.duration_s))  # type: ignore[attr-defined]
        ramp.record(bench.Step("x", target, n, n, target if ok else 0.5 * target, n * bench.NODES,
                               n * bench.NODES if ok else 0, [0.01], 0.0))
    return ramp


@pytest.mark.parametrize("capacity", [25.0, 170.0, 300.0, 1_000.0, 5_000.0])
def test_quick_plan_climbs_until_a_step_fails(bench: ModuleType, capacity: float) -> None:
    ramp = climb(bench, bench.QUICK, capacity)
    assert ramp.fail is not None, "the quick ramp stopped before any step failed"
    best = bench.best_step(ramp.steps)
    assert best is not None and capacity / bench.QUICK.factor < best.target <= capacity


def test_quick_ratio_tells_two_capacities_apart(bench: ModuleType) -> None:
    """The old plan (20/s, x2, four steps) read 1.0x for 300/s vs 1,000/s; this one does not."""
    raw = bench.best_step(climb(bench, bench.QUICK, 300.0).steps)
    node = bench.best_step(climb(bench, bench.QUICK, 1_000.0).steps)
    assert node.target / raw.target >= 2.0
