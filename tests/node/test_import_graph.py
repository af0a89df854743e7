"""No import cycle among the modules of ``node/`` (issue 30).

The graph is read from the source with ``ast``, not by importing: every ``import`` counts, at
module level, under ``if TYPE_CHECKING:`` and inside functions, because a cycle hidden by a
lazy or type-only import is still one (it was how ``NodeRuntime``, ``node.api.app``,
``node.services`` and ``node.apps`` closed a circle). Importing ``a.b.c`` from outside ``a.b``
also runs ``a/__init__`` and ``a/b/__init__``: those edges count too. A package's own
``__init__`` importing its submodules, and those submodules importing siblings, is not a
cycle (Python has the package half-initialised by then), so an importer's own ancestors are
not edges.
"""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import cycles, import_graph

ROOT = Path(__file__).resolve().parents[2]


def test_node_modules_import_no_cycle() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100, "node/ sources not found"
    assert cycles(graph) == [], "import cycles among node/ modules (each list is one cycle)"


def test_the_http_toolkit_imports_nothing_else_of_node() -> None:
    graph = import_graph(ROOT)
    kit = {m for m in graph if m == "node.httpkit" or m.startswith("node.httpkit.")}
    assert kit, "node.httpkit missing"
    outside = {m: sorted(graph[m] - kit) for m in kit if graph[m] - kit}
    assert outside == {}


def test_only_the_composition_root_and_its_callers_import_the_runtime() -> None:
    """Handlers and applications get narrow interfaces (Protocols), never ``NodeRuntime``."""
    graph = import_graph(ROOT)
    users = sorted(m for m, edges in graph.items() if "node.runtime" in edges)
    assert users == ["node.daemon", "node.node_main", "node.services"]


def test_the_check_finds_a_cycle_hidden_by_type_checking_and_lazy_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "node"
    (pkg / "api").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "api" / "__init__.py").write_text("from node.api.app import create_app\n")
    (pkg / "api" / "app.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from node.runtime import R\n")
    (pkg / "runtime.py").write_text("def f():\n    from node.services import build\n")
    (pkg / "services.py").write_text("from node.api import create_app\n")
    (pkg / "sibling.py").write_text("from node import runtime\n")
    found = cycles(import_graph(tmp_path))
    assert found == [["node.api", "node.api.app", "node.runtime", "node.services"]]
