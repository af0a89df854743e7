"""Upgrading a database written before schemas were on the log (migrations up to 0003, schemas
only in the config, a mempool table): the upgraded node serves the same rows, without a step by
hand. The fixture (``tests/fixtures/pre0004``) is a data dir written through the API of that
release's node (commit c29e48c, ``make_fixture.py``), with the rows it served."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from node.apps.db_app import DbApplication
from node.clock import SystemClock
from storage import append_events, make_engine, upgrade
from tests.conftest import ROOT
from tests.harness.cluster import wait_for
from tests.harness.db_helpers import ALICE, RECEIVED_AT, SECTION, db_url, engine
from tests.harness.procs import NodeProcess

__all__ = ["db_url", "engine"]  # the fixtures

FIXTURE = ROOT / "tests" / "fixtures" / "pre0004"


def old_data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "node"
    data.mkdir()
    for name in ("syncnode.db", "identity.key"):
        shutil.copy(FIXTURE / name, data / name)
    (data / "identity.key").chmod(0o600)
    conn = sqlite3.connect(data / "syncnode.db")
    try:
        # Really the old layout, with the old application's state in it.
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0003",)
        assert conn.execute("SELECT count(*) FROM crdt_mempool").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM crdt_entities").fetchone()[0] > 20
    finally:
        conn.close()
    return data


def served(node: NodeProcess, tables: dict[str, Any]) -> dict[str, Any]:
    known = node.get("/v1/db")["tables"]
    return {t: node.get(f"/v1/db/{t}", limit=1000)["rows"] if t in known else None
            for t in tables}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_upgraded_node_serves_the_rows_it_served_before(tmp_path: Path) -> None:
    fixture = json.loads((FIXTURE / "rows.json").read_text())
    tables, expected = fixture["tables"], fixture["rows"]
    assert len(expected["items"]) == 20 and len(expected["tags"]) == 4
    data = old_data_dir(tmp_path)
    env = {"SYNCNODE_DB_TABLES": json.dumps(tables)}
    node = NodeProcess(data, env=env).start()
    try:
        wait_for(lambda: served(node, tables) == expected, 60,
                 "the upgraded node does not serve the old rows")
        for table in tables:
            history = node.get(f"/v1/db-schemas/{table}")
            # Declared by the upgraded node from its config, backdated so the old writes count.
            assert history["owner"] == node.peer_id
            assert [v["lamport"] for v in history["versions"]] == [0]
        log = node.stderr_path.read_text()
        assert "table has writes from before schemas were on the log" in log
        assert "table re-derived" in log
        assert node.terminate() == 0
        # A restart changes nothing: the tables are declared now, nothing is declared again.
        node = NodeProcess(data, env=env).start()
        wait_for(lambda: served(node, tables) == expected, 30, "rows changed after a restart")
        assert all(len(node.get(f"/v1/db-schemas/{t}")["versions"]) == 1 for t in tables)
        # The upgraded table takes new writes as usual.
        node.post("/v1/db/items", {"op": "update", "id": "i1", "values": {"qty": 4}})
        assert node.get("/v1/db/items/i1")["qty"] == 4
        assert node.terminate() == 0
    finally:
        node.kill()


def test_only_writes_stored_before_the_upgrade_make_a_backdated_seed(db_url: str) -> None:
    """Migration 0004 keeps where the old writes end: writes to a table stored after it (a
    restarted node that has synced writes but not yet their table's declaration) never make
    the node backdate its seed, which would take the table over."""
    engine: Engine = make_engine(db_url)
    try:
        upgrade(engine, "0003")
        old = ALICE.write("upsert", "artists", "a", 5, name="Ana")
        with engine.begin() as conn:
            append_events(conn, [old], RECEIVED_AT)
        upgrade(engine)
        new = [ALICE.write("upsert", "private", "p", 6, note="x"),
               ALICE.write("upsert", "artists", "b", 7, name="Bo")]
        with engine.begin() as conn:
            append_events(conn, new, RECEIVED_AT)
        app = DbApplication(SECTION, clock=SystemClock())
        with engine.connect() as conn:
            assert app.has_legacy_writes(conn, "artists")
            assert not app.has_legacy_writes(conn, "private")
    finally:
        engine.dispose()


def test_a_database_that_starts_after_the_upgrade_has_no_old_writes(engine: Engine) -> None:
    with engine.begin() as conn:
        append_events(conn, [ALICE.write("upsert", "artists", "a", 5, name="Ana")], RECEIVED_AT)
    with engine.connect() as conn:
        assert not DbApplication(SECTION, clock=SystemClock()).has_legacy_writes(conn, "artists")
