"""No import circle among the modules of ``sync/``, counting type-only and lazy imports
(``tests.import_graph`` has the rules), and no import of the node's side from it.

Two circles were found this way: ``sync.sds.channel`` and ``sync.sds.persist`` (the state
codec imported the channel back for its type), and five modules of ``sync.sim`` (the hostile
members, the invariants, Recon and fetch-by-id imported the runner for ``Simulation`` and
``Member``; fetch-by-id and Recon each other). The parts now see the runner through
``sync.sim.world``'s protocol and persistence works on ``ChannelState`` and the channel's
layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.import_graph import cycles, import_graph, imported_names, modules

ROOT = Path(__file__).resolve().parents[2]
#: What ``sync/`` (the sans-IO protocol) never imports, not even for a type.
NODE_SIDE = {"node", "storage", "trio", "sqlalchemy"}


def test_sync_modules_import_no_cycle() -> None:
    graph = import_graph(ROOT, "sync")
    assert len(graph) > 100, "sync/ sources not found"
    assert cycles(graph) == [], "import cycles among sync/ modules (each list is one cycle)"


def test_persistence_does_not_import_the_channel() -> None:
    graph = import_graph(ROOT, "sync")
    assert "sync.sds.channel" not in graph["sync.sds.persist"]


def test_sync_imports_nothing_of_the_node_side() -> None:
    found: dict[str, set[str]] = {}
    for name, path in modules(ROOT, "sync").items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bad = {module for module, _ in imported_names(tree, name, path.name == "__init__.py")
               if module.split(".")[0] in NODE_SIDE}
        if bad:
            found[name] = bad
    assert found == {}
