"""Fixtures for emulated-internet tests: an :class:`Internet` torn down even when a test fails."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.net.netns import Internet, sweep_stale


def _require_root() -> None:
    # CI and this machine run as root; elsewhere the tests fail loudly rather than skip.
    if os.geteuid() != 0:
        pytest.fail("tests/net builds network namespaces and must run as root")


@pytest.fixture(scope="session", autouse=True)
def _sweep_stale_runs() -> None:
    _require_root()
    sweep_stale()


@pytest.fixture
def internet() -> Iterator[Internet]:
    """A fresh emulated internet (no hosts yet); every namespace is deleted afterwards, and any
    node process still inside one is killed."""
    net = Internet()
    try:
        yield net
    finally:
        net.close()
