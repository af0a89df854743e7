"""A phase's progress never goes backwards when it runs several Spark stages in turn.

``stage_progress`` once counted the active stages only: when a phase's first stage (1 task)
finished and its second began, the report went from 1/1 back to 0/1, and the snapshot's
progress bar from 50% back to 33% (seen in test_snapshot_cli under a loaded run).
"""

from __future__ import annotations

from spark_jobs.source import StageTally


def test_a_second_stage_adds_to_the_total_instead_of_starting_over() -> None:
    tally = StageTally()
    assert tally.update({7: (0, 1)}) == (0, 1)
    assert tally.update({7: (1, 1)}) == (1, 1)
    # Stage 7 is done and gone; stage 8 starts with none of its 1 task done: 1/2 would be a
    # step back from 1/1, so nothing is reported until the tally is past it.
    assert tally.update({8: (0, 1)}) is None
    assert tally.update({8: (1, 1)}) == (2, 2)


def test_reports_only_forward_and_only_changes() -> None:
    tally = StageTally()
    reports = [tally.update(active) for active in (
        {}, {1: (0, 4)}, {1: (2, 4)}, {1: (2, 4)}, {1: (4, 4), 2: (0, 4)}, {2: (3, 4)},
        {3: (0, 8)}, {3: (8, 8)})]
    assert reports == [None, (0, 4), (2, 4), None, (4, 8), (7, 8), None, (16, 16)]
    shares = [d / t for d, t in filter(None, reports)]
    assert shares == sorted(shares)
