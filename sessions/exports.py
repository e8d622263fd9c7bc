"""A wing's exports, each loaded from its module the first time someone asks for it.

A wing's __init__.py lists what it exports as `from .module import name as name` under
`if TYPE_CHECKING:`, where mypy reads the names and their types, and sets
`__getattr__ = lazy_exports(__name__, __file__)`, which reads that same list. Importing a
wing for one name then loads that name's module and what it needs, no more: the lazy
imports that keep `mntui kill` fast, and a config with a plain node list from loading
nodesource, stay lazy behind a wing.
"""

from __future__ import annotations

import importlib
import re
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


_IMPORT = re.compile(r"[ \t]+from (\.*[\w.]*) import (\w+)(?: as (\w+))?[ \t]*")


def typing_imports(source: str) -> dict[str, tuple[str, str]]:
    """name -> (module, name there) for each `from M import x [as name]` under the
    module's top-level `if TYPE_CHECKING:`, one a line (ruff's import style here).

    Read line by line, not with `ast`: every command imports a few wings, and `ast` was
    ~3 ms of each cold `status` before its first parse. Strict: any other statement in
    that block is a ValueError at import, never a name silently missing (test_layers.py
    checks the result against `ast`'s reading of every wing)."""
    homes: dict[str, tuple[str, str]] = {}
    inside = False
    for line in source.splitlines():
        if line == "if TYPE_CHECKING:":
            inside = True
            continue
        if not inside or not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            inside = False  # the block ended
            continue
        m = _IMPORT.fullmatch(line)
        if m is None:
            raise ValueError(f"not one `from M import x as x` a line: {line.strip()!r}")
        homes[m.group(3) or m.group(2)] = (m.group(1), m.group(2))
    return homes
