"""Fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTDATA = ROOT.parent / "shared" / "testdata"


@pytest.fixture(scope="session")
def testdata() -> Path:
    """``../shared/testdata``; a missing directory fails the test, it never skips it."""
    if not (TESTDATA / "README.md").is_file():
        pytest.fail(f"conformance data missing: {TESTDATA} (shared/ must sit beside the checkout)")
    return TESTDATA


# ``make test`` runs the suite on pytest-xdist workers with ``--dist loadgroup``: tests of one
# group run on one worker, one after another. Two kinds of tests must not overlap:
# - those on the one PostgreSQL database of ``SYNCNODE_TEST_PG`` (each resets it) and the
#   Spark jobs (one local session per worker, a JVM each): group "shared-db";
# - the multi-process clusters, network namespaces and benchmark smokes (several node
#   processes each, timing-sensitive on 2 cores): group "processes", so at most one of them
#   runs at a time, beside at most one lighter test.
SHARED_DB_DIRS = ("storage", "spark_jobs")
SHARED_DB_WORDS = ("SYNCNODE_TEST_PG", "PG_URL", "tests.pg", "db_helpers")
PROCESS_DIRS = ("net", "bench")


def xdist_group(path: Path, source: str) -> str | None:
    """The group of a test module (``None``: any worker, side by side with anything)."""
    directory = path.relative_to(ROOT / "tests").parts[0]
    if directory in SHARED_DB_DIRS or any(word in source for word in SHARED_DB_WORDS):
        return "shared-db"
    if directory in PROCESS_DIRS:
        return "processes"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[Path, str | None] = {}
    for item in items:
        path = Path(str(item.path))
        if path not in groups:
            groups[path] = xdist_group(path, path.read_text())
        group = groups[path] or ("processes" if item.get_closest_marker("slow") else None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
