"""The human forms of the client commands' text output (``node.cli.human``)."""

from __future__ import annotations

from node.cli.human import human_duration, human_size, iso_ms, iso_s


def test_times_durations_and_sizes() -> None:
    assert iso_ms(1_795_680_624_313) == "2026-11-26T08:10:24.313Z"
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_ms(10**30) == str(10**30)  # no clock gives it: the number itself
    assert iso_s(1_795_680_624.9) == "2026-11-26T08:10:24Z"
    assert [human_duration(s) for s in (0.04, 9.96, 12.7, 185, 7385, 367_200)] == [
        "0.0 s", "10.0 s", "12 s", "3 min 05 s", "2 h 03 min", "4 d 06 h"]
    assert [human_size(b) for b in (0, 1023, 1536, 12 * 2**20, 3.2 * 2**30, 2**50)] == [
        "0 B", "1023 B", "1.5 KiB", "12.0 MiB", "3.2 GiB", "1024.0 TiB"]


def test_status_rows_say_nested_values_in_words() -> None:
    from node.cli.node_commands import status_rows

    rows = dict(status_rows({"peer_id": "p", "network_id": 1, "network": {
        "reachability": "private", "dialback": {"ok": 2, "failed": 1}, "relay_serving": False,
        "relays": ["r1"], "punch": {"ok": 0, "failed": 0, "pending": 1},
        "relayed_bytes": 1536}}))
    assert rows["network"] == ("reachability private, dialback ok 2 / failed 1, relay serving "
                               "no, relays 1, punch ok 0 / failed 0 / pending 1, relayed 1.5 KiB")
    assert "False" not in rows["network"] and "=" not in rows["network"]


def test_peers_is_a_table_with_a_header_and_one_form_of_age() -> None:
    from node.cli.node_commands import PEER_HEADER, peer_lines

    now = 1_795_680_624.0
    answer = {"connected": [
        {"peer_id": "12D3KooWA", "direction": "outbound", "path": "direct", "rtt_ms": 1.25,
         "last_recon": {"at": now - 1.0, "outcome": "ok", "fetched": 5, "served": 0},
         "connected_since": now - 0.6, "address": "/ip4/127.0.0.1/tcp/1"},
        {"peer_id": "12D3KooWB", "direction": "inbound", "path": "relayed", "rtt_ms": None,
         "last_recon": None, "connected_since": now - 125, "address": None}],
        "known": ["12D3KooWC", "12D3KooWA"], "address_book": 3}
    lines = peer_lines(answer, now)
    assert lines[0].split("  ")[0] == "PEER ID" and all(h in lines[0] for h in PEER_HEADER)
    assert lines[1].split() == ["12D3KooWA", "outbound", "direct", "1.2", "ms", "1.0", "s", "ago",
                                "ok", "+5/-0", "0.6", "s", "ago", "/ip4/127.0.0.1/tcp/1"]
    assert "2 min 05 s ago" in lines[2] and "offline" in lines[3]
    # Columns line up under the header.
    start = lines[0].index("CONNECTED")
    assert lines[1][start:].startswith("0.6 s ago") and lines[2][start:].startswith("2 min")
    assert lines[-1] == "address book: 3 peers"
    assert peer_lines({"connected": [], "known": []}, now) == ["no peers"]
