"""The import graph of a package of this repository, read from the source with ``ast``, not by
importing, and its circles (used by ``tests/node`` and ``tests/sync``' import-graph tests).

Every ``import`` counts, at module level, under ``if TYPE_CHECKING:`` and inside functions,
because a cycle hidden by a lazy or type-only import is still one. Importing ``a.b.c`` from
outside ``a.b`` also runs ``a/__init__`` and ``a/b/__init__``: those edges count too. A
package's own ``__init__`` importing its submodules, and those submodules importing siblings, is
not a cycle (Python has the package half-initialised by then), so an importer's own ancestors
are not edges.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cycles", "import_graph", "imported_names", "modules"]


def modules(root: Path, package: str = "node") -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported_names(tree: ast.Module, name: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """(module, name or "") for every import statement anywhere in the file."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                yield module, alias.name


def import_graph(root: Path, package: str = "node") -> dict[str, set[str]]:
    """Module -> the modules of ``package`` that importing it runs (see the module doc)."""
    mods = modules(root, package)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        own = name.split(".") if is_package else name.split(".")[:-1]
        edges: set[str] = set()
        for module, alias in imported_names(ast.parse(path.read_text()), name, is_package):
            # ``from pkg import sub`` imports the submodule; ``from pkg import obj`` the package.
            target = f"{module}.{alias}" if f"{module}.{alias}" in mods else module
            if target not in mods:
                continue
            parts = target.split(".")
            edges.add(target)
            edges.update(".".join(parts[:i]) for i in range(1, len(parts))
                         if ".".join(parts[:i]) in mods and own[:i] != parts[:i])
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            vertex, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[vertex] = min(low[vertex], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[vertex])
            if low[vertex] == index[vertex]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == vertex:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found
