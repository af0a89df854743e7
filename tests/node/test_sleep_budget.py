"""At most SLEEP_BUDGET fixed sleeps in tests/node, so that the count cannot creep back.

A test waits on a condition (``tests.harness.cluster.wait_for``/``until``, a node's counter, a
trio event), or on virtual time (a MockClock: ``tests.harness.clocks.let_pass``), not for a
fixed time. The sleeps left are a hostile peer's or a workload's pacing, a window in which
something must not happen with no event to wait on, or a protocol's own real time (a settle
window, a GossipSub heartbeat, repair timers of a real node). docs/testing.md says more.
"""

from __future__ import annotations

import re
from pathlib import Path

SLEEP_BUDGET = 20
HERE = Path(__file__).resolve().parent
# A call of time's or trio's sleep (not trio.sleep_forever, which waits for a cancellation);
# the call is spelled in two pieces here so that this file does not count itself.
SLEEP = re.compile(r"\b(time|trio)\.sleep" + r"\(")
CALL = "sleep" + "("


def _sleeps() -> list[str]:
    return [f"{path.name}:{number}: {line.strip()}"
            for path in sorted(HERE.rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if SLEEP.search(line)]


def test_tests_node_sleeps_stay_within_the_budget() -> None:
    sleeps = _sleeps()
    assert len(sleeps) <= SLEEP_BUDGET, (
        f"{len(sleeps)} fixed sleeps in tests/node (at most {SLEEP_BUDGET}): wait on a condition "
        "or on virtual time instead\n" + "\n".join(sleeps))


def test_the_count_sees_both_spellings() -> None:
    assert SLEEP.search(f"    time.{CALL}1)") and SLEEP.search(f"await trio.{CALL}0.5)")
    assert not SLEEP.search("await trio.sleep_forever()")
    assert not SLEEP.search("await let_pass(120.0)")
