"""The package reads top to bottom: no import cycle, no module over 500 lines (issue 16).

The import rule, as :func:`import_graph` builds it:

- A node is a module of ``switchboard`` (a package is its ``__init__``).
- Every ``import`` statement counts, at any depth: module level, inside a function (a lazy
  import is still a dependency, only a deferred one) or inside ``try``. Only imports under
  ``if TYPE_CHECKING:`` are left out: they never run.
- ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``;
  ``import a.b`` is an edge to ``a.b``. Relative imports are resolved first.
- Importing ``a.b.c`` also runs ``a/b/__init__.py`` first, but that is not an edge: a module
  depends on the names it imports, and a package ``__init__`` that imports its own parts (to
  register them) would otherwise be in a cycle with every one of them.

A cycle is reported with its modules in order, so the failure says which tie to cut.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "switchboard"
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, name: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """``(module, [names])`` for every import statement outside ``if TYPE_CHECKING:``."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each ``switchboard`` module to the ``switchboard`` modules it imports (the rule above)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for base, names in _imports(tree, name, path.name == "__init__.py"):
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            if len(targets) < len(names) or not names:
                targets.append(base)
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each as one cycle
    through it, so the message names a path to cut."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_a_cycle(graph, sorted(c)) for c in components]


def _a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    members = set(component)
    start = component[0]
    # Breadth-first from start back to start, inside the component.
    paths = {w: [start, w] for w in sorted(graph[start] & members)}
    frontier = list(paths)
    while start not in paths:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return paths[start]


def test_the_package_has_no_import_cycle() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import() -> None:
    source = "def f():\n    from switchboard import b\n"
    tree = ast.parse(source)
    assert _imports(tree, "switchboard.a", False) == [("switchboard", ["b"])]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_imports_under_type_checking_are_not_edges() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from switchboard import hub\n"
              "else:\n    from switchboard import db\n")
    names = [n for _, ns in _imports(ast.parse(source), "switchboard.a", False) for n in ns]
    assert "hub" not in names and "db" in names


def test_relative_imports_resolve_against_the_module() -> None:
    tree = ast.parse("from . import leases\nfrom ..models import Todo\n")
    assert _imports(tree, "switchboard.queue.todos", False) == [
        ("switchboard.queue", ["leases"]), ("switchboard.models", ["Todo"])]
    assert _imports(ast.parse("from . import x\n"), "switchboard.queue", True) == [("switchboard.queue", ["x"])]


def test_no_module_imports_a_private_module_of_a_dependency() -> None:
    """``httpx2._sse`` and the like can change in any release; use what the package exports."""
    private = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for module, _ in _imports(tree, name, path.name == "__init__.py"):
            parts = module.split(".")
            if parts[0] not in ("switchboard", "__future__") and any(p.startswith("_") for p in parts):
                private.append(f"{name}: {module}")
    assert not private, "private modules of dependencies imported:\n" + "\n".join(private)


def test_no_module_is_over_500_lines() -> None:
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split near 500, CONVENTIONS.md): {long}"
