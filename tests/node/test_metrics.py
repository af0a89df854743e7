"""``/metrics`` as Prometheus users expect it, from two real node processes driven over real
HTTP and libp2p: typed counters ending in ``_total``, help texts that explain, no placeholder
series, ``build_info``, process metrics, latency histograms, and each metric moving when its
event happens. docs/node.md lists exactly the metrics a node serves."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from tests.node.cluster import start_node, wait_for
from tests.node.procs import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SERIES = re.compile(r"^([a-z_:][a-z0-9_:]*)(\{[^}]*\})? (\S+)$")


def parse(text: str) -> tuple[dict[str, tuple[str, str]], dict[str, float]]:
    """({family: (type, help)}, {series with labels: value})."""
    families: dict[str, list[str]] = {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            families.setdefault(name, ["", ""])[1] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            families.setdefault(name, ["", ""])[0] = kind
        elif line:
            match = SERIES.match(line)
            assert match, f"not exposition format: {line!r}"
            values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return {k: (v[0], v[1]) for k, v in families.items()}, values


def total(values: dict[str, float], family: str) -> float:
    return sum(v for k, v in values.items() if k == family or k.startswith(family + "{"))


def scrape(node: NodeProcess) -> tuple[dict[str, tuple[str, str]], dict[str, float]]:
    return parse(node.get("/metrics"))


def test_exposition_conventions_and_every_metric_moves(tmp_path: Path) -> None:
    env = {"SYNCNODE_API_MAX_FOLLOWS": "1"}
    a = start_node(tmp_path, "a", env=env)
    # b hears no gossip: a's events reach it by Recon, and a resends them meanwhile.
    b = start_node(tmp_path, "b", env={**env, "SYNCNODE_P2P_TEST_DROP_INCOMING_GOSSIP": "1.0"})
    try:
        families, before = scrape(a)
        # -- conventions ------------------------------------------------------------------
        for name, (kind, help_text) in families.items():
            assert kind in ("counter", "gauge", "histogram"), name
            assert (kind == "counter") == name.endswith("_total"), (name, kind)
            words = help_text.lower().replace("_", " ")
            assert help_text and words != name.removeprefix("syncnode_").replace("_", " "), name
            assert len(help_text.split()) >= 3, (name, help_text)
        text = a.get("/metrics")
        assert 'reason="none"' not in text
        assert re.search(r'^syncnode_build_info\{.*version="[^"]+".*\} 1$', text, re.M)
        for process in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                        "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                        "process_start_time_seconds"):
            assert before.get(process, 0) > 0, process
        assert families["process_cpu_seconds_total"][0] == "counter"

        # -- drive the events ---------------------------------------------------------------
        joined = a.post("/v1/peers", {"multiaddr": b.listen_addrs[0]})
        assert joined["peer_id"] == b.peer_id
        dead = httpx.post(a.api_url + "/v1/peers", headers=a.headers, timeout=60,
                          json={"multiaddr": "/ip4/127.0.0.1/tcp/9/p2p/" + b.peer_id})
        assert dead.status_code in (400, 502)
        with a.client() as client:
            for i in range(3):
                r = client.post("/v1/channels/general/events", json={"content": f"m{i}"},
                                headers={"Idempotency-Key": f"k{i}"})
                assert r.status_code == 200
            assert client.post("/v1/channels/general/events", json={"content": "m0"},
                               headers={"Idempotency-Key": "k0"}).status_code == 200
            assert client.get("/v1/channels/general/events",
                              params={"limit": "x"}).status_code == 400
            with client.stream("GET", "/v1/channels/general/follow") as first:
                assert first.status_code == 200
                assert client.get("/v1/channels/general/follow").status_code == 429
        assert httpx.get(a.api_url + "/v1/status").status_code == 401
        # b answers, so that a's messages get acknowledged through b's causal history.
        wait_for(lambda: len(b.get("/v1/channels/general/events")["events"]) >= 3, 60,
                 "Recon did not bring a's events to b")
        b.post("/v1/channels/general/events", {"content": "from b"})

        def moved() -> list[str]:
            _f, after = scrape(a)
            _fb, after_b = scrape(b)
            want_a = [
                "syncnode_events_published_total", "syncnode_events_delivered_total",
                "syncnode_events_stored_total", "syncnode_store_batches_total",
                "syncnode_publish_commit_seconds_count", "syncnode_gossip_bytes_sent_total",
                "syncnode_gossip_bytes_received_total", "syncnode_sds_resends_total",
                "syncnode_sds_acknowledged_total", "syncnode_peer_joins_total",
                "syncnode_p2p_dial_failures_total", "syncnode_p2p_connections_opened_total",
                "syncnode_p2p_streams_opened_total", "syncnode_p2p_streams_accepted_total",
                "syncnode_p2p_gossip_published_total", "syncnode_p2p_gossip_received_total",
                "syncnode_recon_sessions_total", "syncnode_recon_session_seconds_count",
                "syncnode_recon_events_served_total", "syncnode_api_responses_total",
                "syncnode_api_refused_total", "syncnode_api_errors_total",
                "syncnode_api_follows_refused_total", "syncnode_api_idempotent_replays_total",
                "syncnode_api_request_seconds_count", "syncnode_uptime_seconds",
                "syncnode_peers_connected", "process_cpu_seconds_total",
            ]
            want_b = ["syncnode_recon_events_fetched_total", "syncnode_recon_events_stored_total",
                      "syncnode_p2p_gossip_dropped_test_total"]
            return ([m for m in want_a if total(after, m) <= total(before, m)]
                    + [f"b:{m}" for m in want_b if total(after_b, m) <= 0])

        deadline = time.monotonic() + 60
        while (still := moved()) and time.monotonic() < deadline:
            time.sleep(1)
        assert not still, f"these metrics did not move: {still}"
        _f, final = scrape(a)
        buckets = [k for k in final if k.startswith("syncnode_publish_commit_seconds_bucket")]
        assert any('le="+Inf"' in k for k in buckets)
        assert final['syncnode_publish_commit_seconds_bucket{le="+Inf"}'] == \
            final["syncnode_publish_commit_seconds_count"] == 3
        # The repeated key was answered from the first publish: three events, not four.
        assert total(final, "syncnode_events_published_total") == 3
    finally:
        a.kill()
        b.kill()


def test_docs_list_exactly_the_served_metrics(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "n").start()
    try:
        families, _values = scrape(node)
    finally:
        node.kill()
    doc = (ROOT / "docs" / "node.md").read_text()
    section = doc[doc.index("## Metrics"):]
    section = section[:section.index("\n## ", 4)] if "\n## " in section[4:] else section
    listed = set(re.findall(r"^\| `([a-z0-9_]+)`", section, re.M))
    served = {n.removeprefix("syncnode_") for n in families}
    # Application metrics appear only on nodes hosting the application (db, blocks).
    app_only = {n for n in listed if n.startswith(("db_", "blocks_", "cardinal_", "snapshot"))}
    assert served - listed == set(), f"served but not in docs/node.md: {served - listed}"
    assert listed - served - app_only == set(), \
        f"in docs/node.md but not served: {listed - served - app_only}"
