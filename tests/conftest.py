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
