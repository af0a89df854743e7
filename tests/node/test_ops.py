"""Operating a node: /healthz and /readyz as probes use them, and the example Grafana dashboard
only uses metric names that real nodes export."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT
from tests.harness.procs import NodeProcess

DASHBOARD = ROOT / "docs" / "ops" / "grafana-dashboard.json"
DEAD_PEER = "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWNd8DXeVtTXwf8i8RpqKKr16e9W8eLnefWP4s6VvHaNLf"


def _probe(node: NodeProcess, path: str) -> httpx.Response:
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


def _wait_ready(node: NodeProcess, timeout: float = 40.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        answer = _probe(node, "/readyz")
        if answer.status_code == 200 or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


@pytest.mark.timeout(240)
def test_health_readiness_and_dashboard_metric_names(tmp_path: Path) -> None:
    a = NodeProcess(tmp_path / "a").start()
    b: NodeProcess | None = None
    cut_off = NodeProcess(tmp_path / "c", "--bootstrap", DEAD_PEER).start()
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
        b = NodeProcess(tmp_path / "b", "--bootstrap", a.listen_addrs[0]).start()
        ready_b = _wait_ready(b)
        assert ready_b.status_code == 200, ready_b.text
        assert ready_b.json()["checks"]["peers"] == 1
        # Some traffic both ways, then every dashboard metric must exist on a real node.
        for node in (a, b):
            for i in range(3):
                assert node.cli("publish", "general", f"ops {i}").returncode == 0
        time.sleep(2.0)
        exported = _metric_names(a.get("/metrics"))
        for name, labels in _metric_names(b.get("/metrics")).items():
            exported.setdefault(name, set()).update(labels)
        dashboard = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        assert len(exprs) >= 10
        used = {m for e in exprs for m in re.findall(r"\b((?:syncnode|process)_[a-z0-9_]+)", e)}
        assert used and used <= set(exported), sorted(used - set(exported))
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
