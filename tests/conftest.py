"""Fixtures shared by every test package."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Property tests draw their examples from a seed fixed per test ("ci", the default): a run
# passes or fails as the one before it did, and a failure replays by running the test again.
# Each test sizes its own ``max_examples``. ``HYPOTHESIS_PROFILE=explore`` draws fresh examples
# each run (and keeps failing ones in .hypothesis/) to hunt for new counterexamples.
settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
TESTDATA = ROOT / "tests" / "testdata"


@pytest.fixture(scope="session")
def testdata() -> Path:
    """``tests/testdata`` (sources and licences in its README); a missing file fails."""
    if not (TESTDATA / "vectors.md").is_file():
        pytest.fail(f"conformance data missing: {TESTDATA / 'vectors.md'}")
    return TESTDATA


# ``make test`` runs the suite on pytest-xdist workers (``--dist loadgroup``). Tests of one group
# run on one worker, one after another; every other test goes to whichever worker is free. Two
# kinds of tests must not overlap:
# - those on the one PostgreSQL database of ``SYNCNODE_TEST_PG`` (each resets it) and the
#   Spark jobs (one local session per worker, a JVM each): group "shared-db";
# - the network namespaces, benchmark smokes and every file with a ``slow`` test (several node
#   processes each, timing-sensitive on 2 cores): group "processes", so at most one of them runs
#   at a time, beside at most one lighter test.
# xdist 3.8 groups by an ``xdist_group`` mark, through a node id attribute pytest 9 no longer
# reads, so the scheduler below groups by the test's file instead (a benchmark smoke also by
# the script it runs).
SHARED_DB_DIRS = ("storage", "spark_jobs")
SHARED_DB_WORDS = ("SYNCNODE_TEST_PG", "PG_URL", "tests.pg", "db_helpers")
PROCESS_DIRS = ("net", "bench")
BENCH_SCRIPTS = ROOT / "scripts" / "bench"


def xdist_group(path: Path, source: str) -> str | None:
    """The group of a test file whose text (with its script's) is ``source``; ``None``: any
    worker, side by side with anything."""
    directory = path.relative_to(ROOT / "tests").parts[0]
    if directory in SHARED_DB_DIRS or any(word in source for word in SHARED_DB_WORDS):
        return "shared-db"
    if directory in PROCESS_DIRS or "mark.slow" in source:
        return "processes"
    return None


@functools.cache
def _source(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def group_of(nodeid: str) -> str | None:
    """The group of a test by its node id (``tests/x/test_y.py::test_z[param]``)."""
    path = ROOT / nodeid.split("::", 1)[0]
    text = _source(path)
    param = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
    if path.parent.name == "bench" and param.isidentifier():
        text += _source(BENCH_SCRIPTS / f"{param}.py")  # a smoke: what its script uses counts
    return xdist_group(path, text)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FileGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return FileGroupScheduling(config, log)
