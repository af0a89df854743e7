"""Operating a node: /healthz and /readyz as probes use them, and the example Grafana dashboard
only uses metric names that real nodes export."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT
from tests.harness.cluster import wait_for
from tests.harness.inproc import InProcessNode, start_all
from tests.harness.procs import NodeApi

DASHBOARD = ROOT / "docs" / "ops" / "grafana-dashboard.json"
DEAD_PEER = "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWNd8DXeVtTXwf8i8RpqKKr16e9W8eLnefWP4s6VvHaNLf"


def _probe(node: NodeApi, path: str) -> httpx.Response:
    # No token: probes (systemd, load balancers, kubelets) do not have one.
    return httpx.get(node.api_url + path, timeout=30)


def _metric_names(text: str) -> dict[str, set[str]]:
    """Every sample name a node serves -> the label names its samples carry, read with
    prometheus_client's own parser; a family declared without samples yet (a labelled counter
    such as events_rejected_total before the first rejection) counts with its sample names."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        declared = {"counter": [f"{family.name}_total"],
                    "histogram": [f"{family.name}_{s}" for s in ("bucket", "sum", "count")]}
        for name in declared.get(family.type, [family.name]):
            names.setdefault(name, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def _wait_ready(node: NodeApi, timeout: float = 40.0) -> httpx.Response:
    with contextlib.suppress(AssertionError):  # the caller shows the last answer
        wait_for(lambda: _probe(node, "/readyz").status_code == 200, timeout, "not ready")
    return _probe(node, "/readyz")


@pytest.mark.timeout(240)
def test_health_readiness_and_dashboard_metric_names(tmp_path: Path) -> None:
    a, cut_off = start_all([InProcessNode(tmp_path / "a"),
                            InProcessNode(tmp_path / "c", "--bootstrap", DEAD_PEER)])
    b: InProcessNode | None = None
    try:
        health = _probe(a, "/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        # No bootstrap peers: ready with the database alone.
        ready = _probe(a, "/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"ready": True, "checks": {"database": "ok", "peers": 0}}
        # Bootstrap peers configured but none reachable: alive, not ready, and it says why.
        assert _probe(cut_off, "/healthz").status_code == 200
        not_ready = _probe(cut_off, "/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json()["ready"] is False
        assert "no peer connected" in not_ready.json()["error"]
        # Bootstrapping from A: ready once connected.
        b = InProcessNode(tmp_path / "b", "--bootstrap", a.listen_addrs[0]).start()
        ready_b = _wait_ready(b)
        assert ready_b.status_code == 200, ready_b.text
        assert ready_b.json()["checks"]["peers"] == 1
        # Some traffic both ways, then every dashboard metric must exist on a real node.
        for node in (a, b):
            for i in range(3):
                assert node.cli("publish", "general", f"ops {i}").returncode == 0
        dashboard = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        assert len(exprs) >= 10
        used = {m for e in exprs for m in re.findall(r"\b((?:syncnode|process)_[a-z0-9_]+)", e)}
        assert used

        def exported_by_both() -> dict[str, set[str]]:
            names = _metric_names(a.get("/metrics"))
            assert b is not None
            for name, labels in _metric_names(b.get("/metrics")).items():
                names.setdefault(name, set()).update(labels)
            return names

        wait_for(lambda: used <= set(exported_by_both()), 30,
                 lambda: f"not exported: {sorted(used - set(exported_by_both()))}")
        exported = exported_by_both()
        # The labels a query groups by (besides the scrape's own) are on its series.
        for expr in exprs:
            grouped = {label.strip() for group in re.findall(r"\bby \(([^)]*)\)", expr)
                       for label in group.split(",")} - {"instance", "job"}
            for name in re.findall(r"\b((?:syncnode|process)_[a-z0-9_]+)", expr):
                assert grouped <= exported[name], (expr, sorted(exported[name]))
        # The core panels are there (event flow, peers).
        assert {"syncnode_events_stored_total", "syncnode_peers_connected"} <= used
    finally:
        for node in (a, b, cut_off):
            if node is not None:
                node.terminate()
