"""The replication driver's shape (docs/architecture.md "Data flow"): the cores ask for data by
returning an action, never by raising, and hold nothing that reads it; the store reports to the
driver, and its commit observers are fixed when it is built.

This scan fails when
* an exception that asks for data (a name ending in ``Needed``) is caught anywhere in ``node/``
  (the old ``except KeysNeeded`` / ``except DeliveredNeeded`` re-run loops), or leaves
  ``sync.sds``'s channel (its one internal use) or is exported by a ``sync`` package;
* a listener is registered into the store from the replication driver's side (``on_commit``,
  ``on_queued``, ``on_failure`` called in ``node/replication`` or ``node/store``), or the store
  offers ``on_queued`` / ``on_failure`` again;
* a module of ``sync/`` imports SQL (also covered for every node-side name by
  ``tests/sync/test_import_graph.py``);
* the Recon key store (``SummaryKeyStore``) takes or holds a key source (anything that reads
  keys: its driver answers the reads it asks for);
* the store can have an observer registered after it is built (``on_commit`` or any other
  ``on_*`` / ``add_*`` / ``subscribe`` method), or anything in ``node/`` calls ``on_commit``;
* the composition root (``node/services.py``) sets an attribute on an object it did not just
  build (``runtime.recon = ...``): the parts go to constructors (and nothing else in ``node/``
  does either: ``tests/node/test_no_late_wiring.py``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

from node.store.events import EventStore
from sync.recon import SummaryKeyStore

ROOT = Path(__file__).resolve().parents[2]
#: Where the one internal "needed" exception lives: raised deep in a step, caught at its edge.
NEEDED_INSIDE = {"sync/sds/delivered.py", "sync/sds/channel.py"}
DRIVER_SIDE = ("node/replication", "node/store")
LISTENERS = {"on_commit", "on_queued", "on_failure"}


def _sources(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (ROOT / part).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_exception_asks_for_data_outside_the_channel() -> None:
    caught: list[str] = []
    named: list[str] = []
    for path in _sources("node", "sync"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                names = [n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
                         for n in ast.walk(node.type)]
                if any(n.endswith("Needed") for n in names) and _rel(path) not in NEEDED_INSIDE:
                    caught.append(f"{_rel(path)}:{node.lineno}")
            if (isinstance(node, ast.Name | ast.alias) and
                    (node.id if isinstance(node, ast.Name) else node.name).endswith("Needed")
                    and _rel(path) not in NEEDED_INSIDE):
                named.append(f"{_rel(path)}:{getattr(node, 'lineno', '?')}")
    assert caught == [], "a driver catches an exception that asks for data (return an action)"
    assert named == [], "a 'Needed' exception is used outside sync.sds's channel"
    for package in ("sync.recon", "sync.sds", "sync.replication", "sync.transfer"):
        exported = getattr(importlib.import_module(package), "__all__", [])
        assert not [n for n in exported if n.endswith("Needed")], package


def test_nothing_is_registered_into_the_store_from_the_driver_side() -> None:
    found: list[str] = []
    for path in _sources(*DRIVER_SIDE):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in LISTENERS):
                found.append(f"{_rel(path)}:{node.lineno} {node.func.attr}")
    assert found == [], "the driver reads the store's reports; nothing registers into it"
    assert not hasattr(EventStore, "on_queued") and not hasattr(EventStore, "on_failure")


def test_sync_imports_no_sql() -> None:
    found: list[str] = []
    for path in _sources("sync"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{_rel(path)}: {m}" for m in modules
                      if m.split(".")[0] in {"sqlalchemy", "sqlite3", "storage"}]
    assert found == []


def _reads_keys(value: object) -> bool:
    return callable(getattr(value, "keys", None)) and callable(getattr(value, "present", None))


def test_the_key_store_takes_and_holds_no_source() -> None:
    params = inspect.signature(SummaryKeyStore).parameters
    assert list(params)[:1] == ["summary"], "the key store's first argument is its summary"
    assert not {"source", "reader"} & set(params)
    from sync.recon import answered, insert_keys
    from tests.sync.recon.helpers import ListReader

    reader = ListReader(bytes([i, j]) for i in range(40) for j in range(0, 256, 8))
    store = SummaryKeyStore(load=4, max_buckets=64, cache_keys=16)
    insert_keys(store, reader.model.items, reader)
    assert answered(store, reader, lambda: store.count(b"\x05", b"\x20")) == 27 * 32
    assert not hasattr(store, "source")
    assert not [name for name, value in vars(store).items() if _reads_keys(value)]


def test_the_store_takes_its_observers_when_built() -> None:
    assert "observers" in inspect.signature(EventStore).parameters
    registering = [name for name, _ in inspect.getmembers(EventStore, callable)
                   if name.startswith(("on_", "add_", "subscribe"))]
    assert registering == [], "observers are given to the store's constructor"
    calls = [f"{_rel(path)}:{node.lineno}" for path in _sources("node")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "on_commit"]
    assert calls == []


def test_the_composition_root_sets_nothing_on_built_objects() -> None:
    path = ROOT / "node" / "services.py"
    found = [f"{_rel(path)}:{node.lineno}"
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
             for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
             for part in ast.walk(target) if isinstance(part, ast.Attribute)]
    assert found == [], "build the parts first and hand them to the constructor"
