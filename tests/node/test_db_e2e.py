"""The replicated database across real nodes (in this process; the CLI runs as a process):
concurrent writes to the same cells from three nodes, while the table's owner adds a column,
end with identical tables everywhere (no manual replay); the ``syncnode db`` commands end to
end."""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.cluster import channel_log, cluster, metric, wait_for
from tests.harness.inproc import InProcessNode
from tests.harness.procs import NodeApi

TABLES = {"kv": {"columns": {"v": "text", "n": "integer", "ok": "boolean"}}}
ENV = {"SYNCNODE_DB_TABLES": json.dumps(TABLES)}
WRITES_PER_NODE = 40
DB_WRITE_METRICS = ("app_events_applied_total", "db_records_created_total", "db_cells_set_total",
                    "db_upserts_noted_total", "db_tombstones_total", "db_records_deleted_total",
                    "db_tables_reevaluated_total", "db_messages_reevaluated_total",
                    "db_schema_declarations_total")


def rows(node: NodeApi) -> list[dict[str, Any]]:
    return list(node.get("/v1/db/kv", limit=10_000)["rows"])


def columns(node: NodeApi) -> set[str]:
    tables = node.get("/v1/db")["tables"]
    return set(tables["kv"]["columns"]) if "kv" in tables else set()


def wait_declared(nodes: list[NodeApi]) -> None:
    """The nodes declare the table of their config on the log; wait until every one knows it."""
    wait_for(lambda: all(columns(n) for n in nodes), 60, "the table was not declared")


def write_concurrently(node: NodeApi, index: int, writing: set[int] | None = None) -> int:
    """Random upserts, updates and deletes of the same five records from every node; once the
    node knows the column ``extra``, its writes fill it too."""
    rng = random.Random(index)
    with node.client(timeout=60) as client:

        def one(i: int) -> None:
            op = rng.choice(["upsert", "upsert", "update", "delete"])
            body: dict[str, Any] = {"op": op, "id": f"k{rng.randrange(5)}"}
            if op in ("update", "delete"):
                body["pending"] = True  # the record may reach this node only later
            if op != "delete":
                known = client.get("/v1/db").json()["tables"]["kv"]["columns"]
                body["values"] = {"v": f"n{index}-{i}", "n": i,
                                  **({"extra": index * 1000 + i} if "extra" in known else {})}
            client.post("/v1/db/kv", json=body).raise_for_status()
            if writing is not None:
                writing.add(index)
            time.sleep(0.02)  # spread the writes over the schema change

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, range(WRITES_PER_NODE)))
    return WRITES_PER_NODE


def add_column(nodes: list[NodeApi], started: threading.Event) -> str:
    """The owner's node declares version 2 (a new column) while the others write."""
    started.wait()
    owner = nodes[0].get("/v1/db-schemas/kv")["owner"]
    node = next(n for n in nodes if n.peer_id == owner)
    result = node.cli("db", "declare", "kv", "v=text", "n=integer", "ok=boolean",
                      "extra=integer")
    assert result.returncode == 0, result.stderr
    return owner


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_three_nodes_writing_the_same_cells_end_with_identical_tables(tmp_path: Path) -> None:
    with cluster(tmp_path, 3, env=ENV, in_process=True) as nodes:
        wait_declared(nodes)
        started = threading.Event()
        with ThreadPoolExecutor(4) as pool:
            declared = pool.submit(add_column, nodes, started)
            writing: set[int] = set()
            writers = [pool.submit(write_concurrently, n, i, writing)
                       for i, n in enumerate(nodes)]
            # The schema change starts once every node has written.
            wait_for(lambda: len(writing) == len(nodes), 60, "the writers did not start")
            started.set()
            written = sum(w.result() for w in writers)
            owner = declared.result()
        # One record every node writes last through the CLI, with a tie-prone column.
        wait_for(lambda: all("extra" in columns(n) for n in nodes), 60,
                 "version 2 did not reach every node")
        for i, node in enumerate(nodes):
            result = node.cli("db", "upsert", "kv", "shared", f"v=from-{i}", "n=7", "ok=yes",
                              "extra=5")
            assert result.returncode == 0, result.stderr
            assert "applied" in result.stdout
        # Raw bad content on the db channel: stays in the log, rejected and counted everywhere.
        nodes[0].post("/v1/channels/db/events", {"content": "not a crdt message"})
        # Each node may have declared the table from its config: 1 to 3 declarations, + v2.
        least = written + len(nodes) + 1 + 2
        wait_for(lambda: least <= len(channel_log(nodes[0], "db"))
                 == len(channel_log(nodes[1], "db")) == len(channel_log(nodes[2], "db")),
                 90, "the db logs did not converge")
        wait_for(lambda: rows(nodes[0]) == rows(nodes[1]) == rows(nodes[2]), 60,
                 "the tables did not converge")
        table = rows(nodes[0])
        assert {r["id"] for r in table} >= {"shared"}
        shared = next(r for r in table if r["id"] == "shared")
        assert shared["n"] == 7 and shared["ok"] is True and shared["v"].startswith("from-")
        assert shared["extra"] == 5
        # The CLI shows the two versions, the same on every node.
        shown = [n.cli("db", "schema", "kv", "--json") for n in nodes]
        histories = [json.loads(r.stdout) for r in shown]
        assert histories[0] == histories[1] == histories[2]
        assert histories[0]["owner"] == owner and len(histories[0]["versions"]) == 2
        assert "extra" in histories[0]["versions"][1]["columns"]
        text = nodes[0].cli("db", "schema", "kv")
        assert text.returncode == 0 and "v2" in text.stdout and "extra integer" in text.stdout
        for node in nodes:
            wait_for(lambda n=node: metric(n, "db_rejected_total") == 1, 30,  # type: ignore[misc]
                     "the bad message was not counted")
            # Application batches take SQLite's write lock upfront: none may fail.
            assert metric(node, "app_errors_total") == 0
            # Every kind of write moved its counter on every node, and version 2 made each
            # node judge the table's writes again.
            for name in DB_WRITE_METRICS:
                assert metric(node, name) > 0, name
        # The CLI reads the same rows.
        got = nodes[1].cli("db", "get", "kv", "shared", "--json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout) == shared
        listed = nodes[2].cli("db", "query", "kv", "--json")
        assert [json.loads(line) for line in listed.stdout.splitlines()] == table


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_db_cli_writes_reads_and_reports_errors(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "n", env=ENV).start()
    try:
        wait_declared([node])
        # An update of a record that does not exist is an error (exit 1, "not found") ...
        missing = node.cli("db", "update", "kv", "a/1", "n=5")
        assert missing.returncode == 1, missing.stderr
        assert missing.stderr.startswith("error: ") and "no row 'a/1'" in missing.stderr
        assert "applied" not in missing.stdout
        # ... unless asked to wait for the record (it may come from a peer).
        ok = node.cli("db", "update", "kv", "a/1", "n=5", "--pending")
        assert ok.returncode == 0, ok.stderr  # held: no upsert yet
        assert node.cli("db", "get", "kv", "a/1").returncode == 1
        ok = node.cli("db", "upsert", "kv", "a/1", "v=hello world", "ok:=null")
        assert ok.returncode == 0, ok.stderr
        shown = node.cli("db", "get", "kv", "a/1")
        # Columns in declared order (v, n, ok), not sorted.
        assert shown.stdout.split("\n")[:4] == ["id  a/1", "v   hello world", "n   5", "ok  NULL"]
        assert node.cli("db", "query", "kv").stdout.split()[:4] == ["id", "v", "n", "ok"]
        listed = node.cli("db", "query", "kv")
        assert listed.stdout.splitlines()[-1] == "(1 row)"
        assert node.cli("db", "delete", "kv", "a/1").returncode == 0
        assert node.cli("db", "get", "kv", "a/1").returncode == 1
        for args, fragment in [
            (("upsert", "kv", "x", "bogus=1"), "has no column 'bogus'"),
            (("upsert", "kv", "x", "n=many"), "n is an integer column"),
            (("upsert", "kv", "x", "ok=maybe"), "ok is a boolean column"),
            (("upsert", "nope", "x", "v=1"), "no replicated table 'nope'"),
            (("update", "kv", "x"), "update needs at least one"),
        ]:
            bad = node.cli("db", *args)
            assert bad.returncode == 2, (args, bad.stderr)
            assert fragment in bad.stderr and bad.stderr.startswith("error: ")
        wrong = httpx.post(node.api_url + "/v1/db/kv", headers=node.headers,
                           json={"op": "upsert", "id": "x", "values": {"n": "str"}})
        assert wrong.status_code == 400 and "bad_type" in wrong.json()["error"]
        # A new version from the owner (this node): a type change hides the old cells.
        node.cli("db", "upsert", "kv", "b", "v=text")
        changed = node.cli("db", "declare", "kv", "v=integer", "n=integer", "ok=boolean")
        assert changed.returncode == 0, changed.stderr
        assert json.loads(node.cli("db", "get", "kv", "b", "--json").stdout)["v"] is None
        assert node.cli("db", "upsert", "kv", "b", "v=12").returncode == 0
        assert json.loads(node.cli("db", "get", "kv", "b", "--json").stdout)["v"] == 12
        bad = node.cli("db", "declare", "kv", "v=int")
        assert bad.returncode == 2 and "COLUMN=TYPE" in bad.stderr
    finally:
        node.kill()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_failing_application_batch_is_counted_and_retried(tmp_path: Path) -> None:
    """The db application's table vanishes under it (renamed by another SQLite connection):
    its batch fails, is counted in app_errors_total and retried; the node keeps running, and
    once the table is back the write is applied. Nothing is lost."""
    node = InProcessNode(tmp_path / "n", env=ENV).start()
    db = tmp_path / "n" / "syncnode.db"
    try:
        wait_declared([node])
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
            conn.execute("ALTER TABLE crdt_cells RENAME TO crdt_cells_away")
            conn.commit()
        # The write commits to the log; applying it fails (the answer may wait for that).
        with contextlib.suppress(httpx.TimeoutException):
            httpx.post(node.api_url + "/v1/db/kv", headers=node.headers, timeout=3,
                       json={"op": "upsert", "id": "kept", "values": {"v": "through it"}})
        wait_for(lambda: metric(node, "app_errors_total") >= 1, 30, "the failure not counted")
        assert node.get("/v1/status")["peer_id"] == node.peer_id
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
            conn.execute("ALTER TABLE crdt_cells_away RENAME TO crdt_cells")
            conn.commit()
        wait_for(lambda: any(r["id"] == "kept" and r["v"] == "through it" for r in rows(node)),
                 30, "the write was not applied after the table came back")
    finally:
        node.kill()
