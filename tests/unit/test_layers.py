"""The wings hold: no import circle anywhere (lazy and TYPE_CHECKING imports count), and
each wing's exports are what its __init__.py promises. The layers themselves are
import-linter's contract (pyproject.toml, run by test_lint.py)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
from layering import ROOTS, bench_graph, cycles, engine_graph

from mntui.sessions.exports import typing_imports


@pytest.mark.parametrize("root", ROOTS)
def test_no_import_circle(root: str) -> None:
    graph = engine_graph()
    assert cycles(graph, graph.find_descendants(root) | {root}) == []


def test_no_import_circle_in_the_bench() -> None:
    graph = bench_graph()
    assert cycles(graph, graph.modules) == []


def _wings() -> list[str]:
    out = []
    for root in ROOTS:
        package = importlib.import_module(root)
        out += [f"{root}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if m.ispkg]
    return out


def _ast_reading(source: str) -> dict[str, tuple[str, str]]:
    """What `ast` reads under a module's top-level `if TYPE_CHECKING:`: the oracle of
    exports.typing_imports, which reads lines (ast costs every cold command ~3 ms)."""
    import ast

    homes: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.unparse(imp)
                for alias in imp.names:
                    homes[alias.asname or alias.name] = (
                        "." * imp.level + (imp.module or ""),
                        alias.name,
                    )
    return homes


@pytest.mark.parametrize("wing", _wings())
def test_a_wings_list_is_read_as_python_reads_it(wing: str) -> None:
    init = Path(importlib.import_module(wing).__file__ or "")
    assert typing_imports(init.read_text()) == _ast_reading(init.read_text())


def test_a_list_in_another_form_is_refused_not_half_read() -> None:
    with pytest.raises(ValueError, match="one `from M import x as x` a line"):
        typing_imports("if TYPE_CHECKING:\n    from .a import (b, c)\n")
    assert typing_imports("if TYPE_CHECKING:\n    from .a import b as b\n\nx = 1\n") == {
        "b": (".a", "b")
    }


@pytest.mark.parametrize("wing", _wings())
def test_a_wing_exports_what_it_lists(wing: str) -> None:
    """Each name under `if TYPE_CHECKING:` loads, lazily, as the object its module holds;
    none is also the name of one of its modules (importing that module would replace it)."""
    package = importlib.import_module(wing)
    init = Path(package.__file__ or "")
    modules = {p.stem for p in init.parent.glob("*.py")}
    for name, (module, attr) in typing_imports(init.read_text()).items():
        assert name not in modules, f"{wing}.{name} is also a module"
        home = importlib.import_module(module, wing)
        assert getattr(package, name) is getattr(home, attr), f"{wing}.{name}"
