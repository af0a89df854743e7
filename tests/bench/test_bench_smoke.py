"""Benchmarks that cannot rot: every ``scripts/bench/*_bench.py`` runs at its smoke size.

The contract (docs/bench/README.md "Smoke size"): the script accepts ``--smoke``, finishes in
seconds to a minute, prints its JSON result as the last line of stdout with every key of its
``JSON_KEYS`` (read here with ``ast``, without importing the script), exits 0 (non-zero means a
step failed), and writes no ``docs/bench/*.json``. Targets are not asserted. The scripts are
found by globbing, so a new benchmark is picked up without touching this file; one without
``JSON_KEYS`` or ``--smoke`` fails here, it is never skipped. Every other ``.py`` under
``scripts/bench/`` is a helper module or an analysis tool: it must at least import.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

BENCH = ROOT / "scripts" / "bench"
BENCHMARKS = sorted(BENCH.glob("*_bench.py"))
HELPERS = sorted(p for p in BENCH.glob("*.py") if not p.name.endswith("_bench.py"))
SMOKE_TIMEOUT_S = 600

pytestmark = [pytest.mark.slow]


def json_keys(script: Path) -> tuple[str, ...]:
    """The script's ``JSON_KEYS`` literal (a tuple of strings, or another name holding one)."""
    tree = ast.parse(script.read_text())
    values: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
    value = values.get("JSON_KEYS")
    if isinstance(value, ast.Name):  # JSON_KEYS = KEYS
        value = values.get(value.id)
    if value is None:
        pytest.fail(f"{script.name} declares no JSON_KEYS: add a module-level "
                    "JSON_KEYS = (...) naming the keys of its JSON result "
                    '(docs/bench/README.md "Smoke size")')
    keys = ast.literal_eval(value)
    assert keys and all(isinstance(k, str) for k in keys), f"{script.name}: bad JSON_KEYS"
    return tuple(keys)


def docs_json_digests() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((ROOT / "docs" / "bench").glob("*.json"))}


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 9, [p.name for p in BENCHMARKS]


@pytest.mark.timeout(SMOKE_TIMEOUT_S + 60)
@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.stem for p in BENCHMARKS])
def test_benchmark_runs_at_smoke_size(script: Path) -> None:
    keys = json_keys(script)
    assert "--smoke" in script.read_text(), f"{script.name} has no --smoke option"
    before = docs_json_digests()
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(script), "--smoke"], cwd=ROOT, capture_output=True, text=True,
        timeout=SMOKE_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seconds = time.monotonic() - started
    tail = (result.stdout[-1500:] + "\n--- stderr ---\n" + result.stderr[-3000:])
    assert result.returncode == 0, f"{script.name} --smoke exited {result.returncode}:\n{tail}"
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines, f"{script.name} printed nothing"
    try:
        figures = json.loads(lines[-1])
    except json.JSONDecodeError:
        pytest.fail(f"{script.name}: the last line is not JSON:\n{tail}")
    assert isinstance(figures, dict)
    missing = [k for k in keys if k not in figures]
    assert not missing, f"{script.name}: keys missing from its JSON: {missing}"
    assert docs_json_digests() == before, f"{script.name} --smoke wrote into docs/bench/"
    print(f"{script.name} --smoke: {seconds:.1f} s, load {os.getloadavg()[0]:.1f}")


@pytest.mark.parametrize("module", HELPERS, ids=[p.stem for p in HELPERS])
def test_helper_imports(module: Path) -> None:
    """Helpers and tools are not benchmarks (no --smoke), but they must not rot either."""
    code = ("import runpy, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
            "runpy.run_path(sys.argv[3], run_name='not_main')")
    result = subprocess.run([sys.executable, "-c", code, str(ROOT), str(BENCH), str(module)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{module.name} does not import:\n{result.stderr[-2000:]}"
