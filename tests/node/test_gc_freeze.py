"""A started node freezes its start-up's objects out of Python's cycle collector and reports
the collector's pauses (node/telemetry/gc_pauses.py): a full collection then walks the node's
runtime objects only. Real node processes: freezing is process-wide."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cluster import metric, start_node

pytestmark = pytest.mark.timeout(120)


def test_a_started_node_freezes_its_start_up_out_of_garbage_collection(tmp_path: Path) -> None:
    frozen = start_node(tmp_path, "frozen")
    plain = start_node(tmp_path, "plain", env={"SYNCNODE_NODE_GC_FREEZE": "false"})
    try:
        # The modules, classes and libraries of a started node: ~150,000 objects.
        assert metric(frozen, "gc_frozen_objects") > 50_000
        assert metric(plain, "gc_frozen_objects") == 0
        # The full collection before the freeze (and the collector's work since) is counted.
        assert metric(frozen, "gc_full_collections_total") >= 1
        for node in (frozen, plain):
            assert metric(node, "gc_pause_seconds_total") > 0
            assert 0 < metric(node, "gc_pause_max_seconds") <= metric(
                node, "gc_pause_seconds_total")
        assert "start-up objects frozen out of garbage collection" in (
            frozen.stderr_path.read_text())
    finally:
        frozen.kill()
        plain.kill()
