"""The memory debug hook (node/telemetry/memtrace.py) and its reader
(scripts/bench/memtrace_diff.py): two samples, read back."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from node.clock import SystemClock
from node.telemetry.memtrace import DIR_ENV, MemTrace, memtrace_from_env
from tests.conftest import ROOT


def test_off_unless_the_variable_names_a_directory(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.delenv(DIR_ENV, raising=False)
    assert memtrace_from_env(SystemClock()) is None
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    hook = memtrace_from_env(SystemClock())
    assert hook is not None and hook.directory == tmp_path and hook.period_s == 60


def test_samples_say_what_grew(tmp_path: Path) -> None:
    hook = MemTrace(tmp_path / "n0", 60, SystemClock())
    hook.directory.mkdir()
    tracemalloc.start(4)
    try:
        hook.sample(100)
        held = [bytes(1000) for _ in range(3000)]  # 2.96 MiB (1,033 B each) from one line
        hook.sample(200)
    finally:
        tracemalloc.stop()
    memory = json.loads(max(hook.directory.glob("mem-*.json")).read_text())
    assert {"rss", "sqlite", "malloc_in_use", "malloc_free", "python_traced"} <= set(memory)
    # What the line holds is traced (a margin below 2.96 MiB, none above: the samples' own
    # allocations are traced too).
    assert memory["rss"] > memory["python_traced"] >= 2.8
    out = subprocess.run([sys.executable, str(ROOT / "scripts/bench/memtrace_diff.py"),
                          str(hook.directory), "--since", "0", "--top", "5"],
                         capture_output=True, text=True, check=True).stdout
    assert "held = [bytes(1000)" in out, out
    del held
