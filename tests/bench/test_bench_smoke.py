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


@pytest.mark.slow
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


# Imports every helper, each in a child forked from one interpreter that has imported what
# they share (the node, libp2p): one start-up for all of them instead of one each
# (seconds apiece), and still a fresh module namespace and sys.path per helper.
_IMPORT_ALL = """
import json, os, runpy, sys, traceback
root, bench, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path[:0] = [root, bench]
import httpx, libp2p, node.replication, node.store.events, storage, sync.sds, trio  # shared by most
import tests.harness.cluster, tests.net.nodes  # the attack helpers', backlog_rss's, chaos_group's
errors = {}
for path in paths:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            runpy.run_path(path, run_name="not_main")
            message = ""
        except BaseException:
            message = traceback.format_exc() or "failed"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    errors[path] = message or ("" if status == 0 else f"child exited with status {status}")
print(json.dumps(errors))
"""


@pytest.fixture(scope="module")
def helper_import_errors() -> dict[str, str]:
    """Each helper's path -> the traceback of its import (empty when it imported)."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, str(ROOT), str(BENCH), *map(str, HELPERS)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"importing the helpers failed:\n{result.stderr[-3000:]}"
    errors: dict[str, str] = json.loads(result.stdout.splitlines()[-1])
    return errors


@pytest.mark.parametrize("module", HELPERS, ids=[p.stem for p in HELPERS])
def test_helper_imports(module: Path, helper_import_errors: dict[str, str]) -> None:
    """Helpers and tools are not benchmarks (no --smoke), but they must not rot either."""
    error = helper_import_errors[str(module)]
    assert not error, f"{module.name} does not import:\n{error[-2000:]}"
