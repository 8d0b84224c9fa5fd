"""No import circle inside rlkit: the module graph (every import statement, module level or inside a function;
those under `if TYPE_CHECKING:` never run and are left out) has no strongly connected part of two or more
modules. lint-imports holds the floors between packages; this holds modules inside one package too, where a
lazy import once closed monitor/trajectory <-> monitor/trials and validate/context <-> validate/preflight."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def modules(root: Path, package: str) -> dict[str, Path]:
    found = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(tree: ast.AST, here: list[str], mods: dict[str, Path]) -> set[str]:
    """The package's modules a file's import statements name; `here` is the file's package, for relative ones."""

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    targets: set[str] = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            targets.update(filter(None, (known(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*here[:len(here) - node.level + 1], base]).strip(".")
            for alias in node.names:
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else known(base)
                if target:
                    targets.add(target)
        todo.extend(ast.iter_child_nodes(node))
    return targets


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the package's modules it imports (`from pkg import mod` names the module; `from pkg.mod
    import name` names pkg.mod; anything outside the package is left out)."""
    mods = modules(root, package)
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        graph[mod] = _imported(ast.parse(path.read_text(), str(path)), here, mods) - {mod}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                connect(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_rlkit_has_no_import_circle() -> None:
    graph = import_graph(REPO, "rlkit")
    assert len(graph) > 100 and "rlkit.monitor.trajectory" in graph["rlkit.monitor.trials"]
    assert circles(graph) == [], "import circles inside rlkit (move what both need to the lower module or a third)"


def test_a_lazy_import_that_closes_a_circle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from pkg.sub.b import thing\n")
    (pkg / "sub" / "b.py").write_text("def thing():\n    from pkg.sub import a\n    return a\n")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import d\n")
    (pkg / "sub" / "d.py").write_text("from .c import TYPE_CHECKING\n")
    assert circles(import_graph(tmp_path, "pkg")) == [["pkg.sub.a", "pkg.sub.b"]]
