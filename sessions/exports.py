"""A wing's exports, each loaded from its module the first time someone asks for it.

A wing's __init__.py lists what it exports as `from .module import name as name` under
`if TYPE_CHECKING:`, where mypy reads the names and their types, and sets
`__getattr__ = lazy_exports(__name__, __file__)`, which reads that same list. Importing a
wing for one name then loads that name's module and what it needs, no more: the lazy
imports that keep `mntui kill` fast, and a config with a plain node list from loading
nodesource, stay lazy behind a wing.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path


def lazy_exports(package: str, init_file: str) -> Callable[[str], object]:
    """The wing's module `__getattr__`: an unlisted name is an AttributeError, as for any
    module (so `from wing import submodule` still finds the submodule)."""
    homes = typing_imports(Path(init_file).read_text())

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = home
        if module == ".":  # `from . import submodule as name`
            value: object = importlib.import_module(f".{attr}", package)
        else:
            value = getattr(importlib.import_module(module, package), attr)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    return __getattr__


def typing_imports(source: str) -> dict[str, tuple[str, str]]:
    """name -> (module, name there) for each `from M import x [as name]` under the
    module's top-level `if TYPE_CHECKING:`."""
    homes: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for imp in node.body:
            if isinstance(imp, ast.ImportFrom):
                module = "." * imp.level + (imp.module or "")
                for alias in imp.names:
                    homes[alias.asname or alias.name] = (module, alias.name)
    return homes
