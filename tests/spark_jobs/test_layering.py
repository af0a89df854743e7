"""Layering: the jobs never import the node package, the node never imports the jobs' manifest,
and ``sync`` modules stay sans-IO."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_spark_jobs_do_not_import_node() -> None:
    for path in (ROOT / "spark_jobs").glob("*.py"):
        bad = {n for n in _imports(path) if n == "node" or n.startswith("node.")}
        assert not bad, f"{path.name} imports {bad}"


def test_bootstrap_does_not_import_spark_jobs() -> None:
    bootstrap = ROOT / "node" / "snapshots" / "bootstrap.py"
    bad = {n for n in _imports(bootstrap) if n.startswith("spark_jobs")}
    assert not bad


def test_new_sync_modules_are_sans_io() -> None:
    forbidden = ("trio", "libp2p", "sqlalchemy", "sqlite3", "psycopg", "time", "os", "pathlib",
                 "storage", "node", "spark_jobs", "pyspark")
    for name in ("snapshot_manifest.py", "stored_event.py", "recordstream/blocks.py"):
        bad = {n for n in _imports(ROOT / "sync" / name) if n.split(".")[0] in forbidden}
        assert not bad, f"sync/{name} imports {bad}"


def test_node_key_file_name_matches_the_node() -> None:
    from node.p2p.identity import KEY_FILE
    from spark_jobs.snapshot import NODE_KEY_FILE

    assert NODE_KEY_FILE == KEY_FILE
