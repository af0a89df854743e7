"""Storage fixtures: every test runs on SQLite and, when SYNCNODE_TEST_PG is set, on PostgreSQL."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from storage import EventRecord, make_engine, upgrade
from tests.pg import reset_postgres

PG_URL = os.environ.get("SYNCNODE_TEST_PG", "")
BACKENDS = ["sqlite", *(["postgresql"] if PG_URL else [])]


def fresh_url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'node.db'}"
    reset_postgres(PG_URL)
    return PG_URL


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return fresh_url(request.param, tmp_path)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    upgrade(eng)
    yield eng
    eng.dispose()


def make_record(i: int, channel: str = "general", sender: str = "peerA") -> EventRecord:
    digest = hashlib.sha256(f"{channel}/{sender}/{i}".encode()).digest()
    return EventRecord(
        recon_key=b"\xce\x01\x05\x01" + digest + i.to_bytes(8, "big"),
        message_id=digest.hex(),
        channel=channel,
        sender=sender,
        lamport=1_700_000_000_000 + i,
        wire=b"wire-" + digest,
    )
