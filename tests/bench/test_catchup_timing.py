"""A catch-up is timed by the node's own records (tests/harness/catchup_timing.py), not by the
bins in which its events arrived: a node stores what one fetch brings in one commit with one
``received_at``, so 616 events of one 2-second fetch counted 12,320/s by 50 ms bins. These feed
the helper lines in the node's own log format, without starting any process."""

from __future__ import annotations

import logging
from pathlib import Path

from node.telemetry.logs import _Formatter, kv
from tests.harness import catchup_timing as timing

T = 1_796_568_216_000  # epoch ms


def session_line(peer: str, events: int, started_ms: int, ended_ms: int) -> str:
    """The line node/replication/recon_session.py logs for a session that fetched."""
    record = logging.LogRecord("syncnode.recon", logging.INFO, __file__, 0,
                               "recon fetched events", (), None)
    fields = kv(peer=peer, role="responder", events=events, started_ms=started_ms,
                ended_ms=ended_ms, seconds=(ended_ms - started_ms) / 1000)
    record.fields = fields["fields"]
    return _Formatter(as_json=False).format(record)


def test_one_delivery_is_timed_from_the_start_of_the_session_that_brought_it(
        tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text("\n".join([
        "ts=2026-12-06T14:43:23.381Z level=info logger=syncnode.recon msg=\"other\"",
        session_line("12D3KooWearlier", 5, T - 60_000, T - 59_000),  # long before: not it
        session_line("12D3KooWb", 616, T, T + 1_900),
    ]) + "\n")
    sessions = timing.fetch_sessions(log)
    assert [(s.events, s.started_ms) for s in sessions] == [(5, T - 60_000), (616, T)]
    # All 616 stored in one commit, just after the session ended.
    timed = timing.timed_catchup([T + 2_000] * 616, sessions)
    assert timed is not None and timed.by_session and timed.start_ms == T and timed.seconds == 2.0
    assert timed.rate == 308


def test_a_catch_up_gossip_began_is_timed_from_the_first_arrival() -> None:
    fetched = timing.Session("b", 500, T + 10_000, T + 10_500)
    timed = timing.timed_catchup([T, *[T + 10_600] * 500], [fetched])
    assert timed is not None and not timed.by_session
    assert timed.start_ms == T and timed.events == 501
    assert timed.rate == round(501 / 10.6)
    # One gossip delivery and nothing else: no time passed, no rate.
    once = timing.timed_catchup([T, T], [])
    assert once is not None and once.rate is None
    assert timing.timed_catchup([], [fetched]) is None
