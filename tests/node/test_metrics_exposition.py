"""``/metrics`` reads as the Prometheus ecosystem writes it: prometheus_client's own parser reads
it, bucket bounds and values print as their shortest decimal (``le="0.0025"``, not
``0.0025000000000000001``), and every series appears once. Checked on a ``Metrics`` registry and
on a real node process."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from node.telemetry.metrics import Metrics
from tests.harness.inproc import InProcessNode

# A sample line's value: the last field (no timestamps are written).
_VALUE = re.compile(r"^[^#].* (\S+)$", re.M)


def _float_noise(text: str) -> list[str]:
    """Values printed with more digits than the float needs (``3.4100000000000001``); Go's
    exponent form for large numbers (``1.30527232e+08``, exact) is the convention."""
    noisy = []
    for value in _VALUE.findall(text):
        if value in ("+Inf", "-Inf", "NaN") or "e" in value:
            continue
        if value != repr(float(value)):
            noisy.append(value)
    return noisy


def _duplicates(text: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    counts = Counter((s.name, tuple(sorted(s.labels.items())))
                     for family in text_string_to_metric_families(text) for s in family.samples)
    return [series for series, n in counts.items() if n > 1]


def _has_bucket(text: str, family: str, le: str) -> bool:
    return any(s.name == family + "_bucket" and s.labels.get("le") == le
               for f in text_string_to_metric_families(text) for s in f.samples)


def test_bounds_and_values_print_as_their_shortest_decimal() -> None:
    metrics = Metrics()
    metrics.describe_histogram("commit_seconds", "Seconds a commit took, end to end")
    for seconds in (0.0007, 0.002, 0.0031, 0.04, 0.9):
        metrics.observe("commit_seconds", seconds)
    metrics.set("rtt_seconds", 0.0088, peer="6Xs9RunsjqVK")
    metrics.set("resident_bytes", 137519104)
    metrics.inc("events_total", 3)
    text = metrics.render()
    assert _has_bucket(text, "syncnode_commit_seconds", "0.0025")
    assert _float_noise(text) == []
    assert _has_bucket(text, "syncnode_commit_seconds", "+Inf")
    assert 'syncnode_commit_seconds_bucket{le="0.0025"} 2.0' in text
    assert 'syncnode_rtt_seconds{peer="6Xs9RunsjqVK"} 0.0088' in text
    assert "syncnode_resident_bytes 1.37519104e+08" in text  # exact, not 1.37519e+08
    assert "syncnode_events_total 3.0" in text


def test_a_series_appears_once_whatever_its_label_order() -> None:
    metrics = Metrics()
    metrics.inc("rejected_total", channel="general", reason="duplicate")
    metrics.inc("rejected_total", reason="duplicate", channel="general")
    metrics.inc("rejected_total", 2, channel="general", reason="duplicate")
    metrics.observe("took_seconds", 0.01, outcome="ok")
    metrics.observe("took_seconds", 0.02, outcome="ok")
    text = metrics.render()
    assert _duplicates(text) == []
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "syncnode_rejected_total"]
    assert [(s.labels, s.value) for s in samples] == [
        ({"channel": "general", "reason": "duplicate"}, 4.0)]
    assert metrics.value("rejected_total", reason="duplicate", channel="general") == 4
    assert metrics.value("took_seconds", outcome="ok") == 2
    # Replaced label sets (per-peer gauges) leave no stale series behind.
    metrics.set("rtt_seconds", 0.1, peer="a")
    metrics.clear("rtt_seconds")
    metrics.set("rtt_seconds", 0.2, peer="b")
    assert 'peer="a"' not in metrics.render()


def test_each_node_has_its_own_registry() -> None:
    """Tests run several nodes in one process: one node's series never show on another's."""
    first, second = Metrics(), Metrics()
    first.inc("events_stored_total", 5)
    assert "syncnode_events_stored_total" not in second.render()
    assert second.value("events_stored_total") == 0
    # Both carry the standard process series, once each.
    for metrics in (first, second):
        text = metrics.render()
        assert text.count("# TYPE process_cpu_seconds_total counter") == 1
        assert _duplicates(text) == []


def test_a_name_keeps_one_kind() -> None:
    metrics = Metrics()
    metrics.describe_histogram("took_seconds", "Seconds a thing took, end to end")
    with pytest.raises(ValueError, match="histogram"):
        metrics.inc("took_seconds")
    with pytest.raises(ValueError, match="_total"):
        metrics.describe("events_stored", "counter", "Events stored in the log")
    metrics.gauge_fn("uptime_seconds", lambda: 1.5, "Seconds since the node started")
    with pytest.raises(ValueError, match="computed"):
        metrics.set("uptime_seconds", 2.0)
    assert "syncnode_uptime_seconds 1.5" in metrics.render()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_real_nodes_metrics_parse_with_prometheus_client(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "n").start()
    try:
        for i in range(3):  # publishes: commit latency and API latency histograms
            assert node.cli("publish", "general", f"m{i}").returncode == 0
        text = node.get("/metrics")
    finally:
        node.terminate()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # The selector a dashboard writes by hand matches.
    assert _has_bucket(text, "syncnode_api_request_seconds", "0.0025"), \
        [line for line in text.splitlines() if "api_request_seconds_bucket" in line][:3]
    assert _has_bucket(text, "syncnode_publish_commit_seconds", "0.0025")
    assert _float_noise(text) == []
    assert _duplicates(text) == []
    for name, kind in (("process_cpu_seconds", "counter"), ("process_resident_memory_bytes",
                       "gauge"), ("process_open_fds", "gauge"), ("process_max_fds", "gauge"),
                       ("process_start_time_seconds", "gauge"),
                       ("syncnode_events_stored", "counter"),
                       ("syncnode_api_request_seconds", "histogram")):
        assert families[name].type == kind, name
        assert families[name].samples, name
    # Every TYPE line names a family the parser read (nothing untyped or malformed).
    assert all(f.type in ("counter", "gauge", "histogram") for f in families.values()), \
        sorted(f.name for f in families.values() if f.type not in ("counter", "gauge",
                                                                      "histogram"))
