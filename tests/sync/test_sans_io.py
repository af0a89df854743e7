"""Every module of ``sync`` is sans-IO: no clock, no I/O, no event loop, no storage or node.

Randomness is allowed only as a ``random.Random`` passed in (or seeded by the caller): a module
may import ``random`` for the type, never call the module-level functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SYNC = Path(__file__).resolve().parents[2] / "sync"
FORBIDDEN = {"trio", "anyio", "asyncio", "libp2p", "socket", "select", "selectors", "threading",
             "multiprocessing", "subprocess", "sqlalchemy", "sqlite3", "psycopg", "time", "os",
             "pathlib", "shutil", "tempfile", "storage", "node", "spark_jobs", "pyspark",
             "httpx", "secrets"}
# Module-level functions of ``random`` that draw from the shared, unseeded generator.
GLOBAL_RANDOM = {"random", "randint", "randrange", "choice", "choices", "shuffle", "sample",
                 "uniform", "getrandbits", "randbytes", "seed"}
MODULES = sorted(p for p in SYNC.rglob("*.py") if not p.name.endswith("_pb2.py"))


def test_the_package_is_found() -> None:
    assert len(MODULES) > 50, SYNC


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SYNC)))
def test_module_is_sans_io(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad.update(a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FORBIDDEN:
                bad.add(node.module)
            if node.module == "random":
                bad.update(f"random.{a.name}" for a in node.names if a.name in GLOBAL_RANDOM)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in {"Random", "SystemRandom"} and not node.args):
            bad.add(f"unseeded random.{node.func.attr}()")
        elif (isinstance(node, ast.Attribute) and node.attr in GLOBAL_RANDOM
              and isinstance(node.value, ast.Name) and node.value.id == "random"):
            bad.add(f"random.{node.attr}()")
    assert not bad, f"sync/{path.relative_to(SYNC)} uses {sorted(bad)}"
