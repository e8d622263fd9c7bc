"""The import graph of the engine, the app and the bench, measured: lines, import levels
(the longest chain of imports inside a package, a circle counted as one step) and import
circles. tests/unit/test_layers.py keeps the circles at zero; run this file for the table:

    .venv/bin/python tests/layering.py
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grimp

from mntui.sessions.exports import typing_imports

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("mntui.sessions", "mntui.tui")
# Where each root's source lives (package-dir in pyproject.toml).
FOLDERS = {"mntui.sessions": REPO / "sessions", "mntui.tui": REPO / "tui"}


@dataclass(frozen=True)
class Package:
    """One folder's numbers: `levels` counts imports inside the folder only."""

    name: str
    modules: int
    lines: int
    levels: int
    cycles: tuple[tuple[str, ...], ...]


def engine_graph() -> grimp.ImportGraph:
    """Every import in mntui.sessions and mntui.tui, lazy ones and TYPE_CHECKING ones
    included: a circle through a function-level import is still a circle."""
    return grimp.build_graph(*ROOTS, cache_dir=None)


def through_exports(graph: grimp.ImportGraph) -> grimp.ImportGraph:
    """The same imports with each wing's lazy exports seen through: `from
    mntui.sessions.launch import kill_job` counts as an import of launch/kill.py, not of
    the wing's __init__.py (which lists every module it exports from), so that the levels
    count chains of modules, as they did before there were wings."""
    out = grimp.ImportGraph()
    for module in graph.modules:
        out.add_module(module)
    for module in graph.modules:
        if not module.startswith(ROOTS):
            continue
        for target in graph.find_modules_directly_imported_by(module):
            for real in _seen_through(module, target):
                out.add_import(importer=module, imported=real)
    return out


def _seen_through(importer: str, target: str) -> set[str]:
    path = _path(target) if target.startswith(ROOTS) else None
    if path is None or path.name != "__init__.py" or importer.startswith(target):
        return {target}
    exported = typing_imports(path.read_text())
    own = _path(importer)
    assert own is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(own.read_text())):
        if isinstance(node, ast.ImportFrom) and _absolute(importer, node) == target:
            for alias in node.names:
                home = exported.get(alias.name, (f".{alias.name}", ""))[0]
                found.add(target + home if home != "." else f"{target}.{alias.name}")
    return {m for m in found if _path(m) is not None} or {target}


def _absolute(importer: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    own = _path(importer)
    parts = importer.split(".")
    if own is None or own.name != "__init__.py":
        parts = parts[:-1]
    parts = parts[: len(parts) - node.level + 1]
    return ".".join([*parts, node.module] if node.module else parts)


def bench_graph() -> grimp.ImportGraph:
    """bench/ is scripts on sys.path, not a package grimp can build: its imports of each
    other, read with ast, every nesting level included."""
    names = {p.stem for p in (REPO / "bench").glob("*.py")}
    graph = grimp.ImportGraph()
    for path in sorted((REPO / "bench").glob("*.py")):
        graph.add_module(f"bench.{path.stem}")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module.split(".")[0]]
            for target in targets:
                if target in names and target != path.stem:
                    graph.add_import(
                        importer=f"bench.{path.stem}",
                        imported=f"bench.{target}",
                        line_number=node.lineno,
                        line_contents="",
                    )
    return graph


def _within(graph: grimp.ImportGraph, modules: set[str]) -> dict[str, set[str]]:
    return {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}


def strong_components(edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components, iteratively (no recursion limit on deep graphs)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: set[str] = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.add(top)
                    if top == node:
                        break
                out.append(comp)
    return out


def cycles(graph: grimp.ImportGraph, modules: Iterable[str]) -> list[tuple[str, ...]]:
    """The import circles among `modules`: each a sorted tuple of the modules in it."""
    edges = _within(graph, set(modules))
    found = [c for c in strong_components(edges) if len(c) > 1]
    found += [{m} for m, to in edges.items() if m in to]
    return sorted(tuple(sorted(c)) for c in found)


def levels(graph: grimp.ImportGraph, modules: Iterable[str]) -> int:
    """The longest import chain among `modules`, a module importing none of them being
    level 1 and a circle counted as one module."""
    edges = _within(graph, set(modules))
    comps = strong_components(edges)  # Tarjan: a component comes after all it imports
    comp_of = {m: i for i, c in enumerate(comps) for m in c}
    depth: list[int] = []
    for i, comp in enumerate(comps):
        below = {comp_of[t] for m in comp for t in edges[m]} - {i}
        depth.append(1 + max((depth[j] for j in below), default=0))
    return max(depth, default=0)


def _path(module: str) -> Path | None:
    root = next((r for r in ROOTS if module == r or module.startswith(r + ".")), None)
    if root is None:
        return None
    rel = module.removeprefix(root).lstrip(".").replace(".", "/")
    base = FOLDERS[root] / rel if rel else FOLDERS[root]
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return path if path.is_file() else None


def _lines(module: str) -> int:
    path = _path(module)
    return len(path.read_text().splitlines()) if path is not None else 0


def packages(graph: grimp.ImportGraph) -> list[Package]:
    """Every package in the engine and the app with its own modules (a subpackage is a
    row of its own; a root's "(all)" row counts its whole tree). Circles are the graph's;
    levels count chains of modules, the wings' exports seen through and their
    __init__.py, which only lists them, left out."""
    rows: list[Package] = []
    chains = through_exports(graph)
    every = {m for r in ROOTS for m in graph.find_descendants(r) | {r}}
    pkgs = {m for m in every if any(c.startswith(m + ".") for c in every)}
    for pkg in sorted(pkgs):
        own = {m for m in every if m.rpartition(".")[0] == pkg and m not in pkgs} | {pkg}
        rows.append(_row(pkg, own, graph, chains, own - {pkg}))
    for root in ROOTS:
        tree = graph.find_descendants(root) | {root}
        rows.append(_row(f"{root} (all)", tree, graph, chains, tree - pkgs))
    return rows


def _row(
    name: str, own: set[str], graph: grimp.ImportGraph, chains: grimp.ImportGraph, flat: set[str]
) -> Package:
    lines = sum(_lines(m) for m in own)
    return Package(name, len(own), lines, levels(chains, flat), tuple(cycles(graph, own)))


def wing_levels(graph: grimp.ImportGraph, root: str) -> dict[str, int]:
    """Each direct child of `root` squashed to one node: its level among its siblings."""
    children = graph.find_children(root)
    edges: dict[str, set[str]] = {c: set() for c in children}
    for c in children:
        for m in graph.find_descendants(c) | {c}:
            for t in graph.find_modules_directly_imported_by(m):
                owner = next((o for o in children if t == o or t.startswith(o + ".")), None)
                if owner is not None and owner != c:
                    edges[c].add(owner)
    comps = strong_components(edges)
    comp_of = {m: i for i, comp in enumerate(comps) for m in comp}
    depth: list[int] = []
    for i, comp in enumerate(comps):
        below = {comp_of[t] for m in comp for t in edges[m]} - {i}
        depth.append(1 + max((depth[j] for j in below), default=0))
    return {m: depth[comp_of[m]] for m in children}


def main() -> None:
    graph = engine_graph()
    print(f"{'package':32} {'modules':>7} {'lines':>6} {'levels':>6}  circles")
    for row in packages(graph):
        circ = "; ".join(" ↔ ".join(m.rpartition(".")[2] for m in c) for c in row.cycles)
        print(f"{row.name:32} {row.modules:>7} {row.lines:>6} {row.levels:>6}  {circ or '-'}")
    bench = bench_graph()
    circ = "; ".join(" ↔ ".join(c) for c in cycles(bench, bench.modules))
    print(f"{'bench':32} {len(bench.modules):>7} {'':>6} {levels(bench, bench.modules):>6}  {circ}")
    for root in ROOTS:
        wl = wing_levels(graph, root)
        if any(graph.find_children(c) for c in wl):
            print(f"{root} wings by level:", end="")
            for lvl in sorted(set(wl.values()), reverse=True):
                names = sorted(m.rpartition(".")[2] for m, v in wl.items() if v == lvl)
                print(f"  {lvl}: {' '.join(names)}", end="")
            print()


if __name__ == "__main__":
    sys.exit(main())
