"""YAML loading that remembers where every value came from.

PyYAML's `safe_load` throws away line numbers and silently keeps the last of two
duplicate keys. A config error that says `nodes[1].env` without a line sends the
user hunting, and a silently dropped duplicate launches the wrong job, so we walk
the composed node tree ourselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError

Path_ = tuple[str | int, ...]


class ConfigError(UsageError):
    """A problem with user input, reported as `file:line key.path: what is wrong`."""

    def __init__(self, file: str, line: int | None, keypath: str, message: str) -> None:
        self.file, self.line, self.keypath, self.message = file, line, keypath, message
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where} {keypath}: {message}" if keypath else f"{where}: {message}")


def format_path(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@dataclass(frozen=True)
class Document:
    """Plain Python data plus the line (1-based) of each value, keyed by path."""

    file: str
    data: Any
    lines: dict[Path_, int]

    def line(self, path: Path_) -> int | None:
        # A missing key has no line of its own: point at the nearest parent.
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path)

    def error(self, path: Path_, message: str) -> ConfigError:
        return ConfigError(self.file, self.line(path), format_path(path), message)


def load(path: Path) -> Document:
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(name, None, "", f"cannot read: {exc.strerror or exc}") from None
    return loads(text, name)


def loads(text: str, name: str = "<config>") -> Document:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(name, line, "", f"invalid YAML: {exc.problem}") from None
    lines: dict[Path_, int] = {}
    if root is None:
        return Document(name, None, lines)
    constructor = yaml.SafeLoader("")
    data = _walk(root, (), lines, constructor, name)
    return Document(name, data, lines)


def _walk(
    node: yaml.Node, path: Path_, lines: dict[Path_, int], ctor: yaml.SafeLoader, name: str
) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        ctor.flatten_mapping(node)  # resolves `<<:` merge keys
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = ctor.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int)):
                raise ConfigError(
                    name,
                    key_node.start_mark.line + 1,
                    format_path(path),
                    f"keys must be strings, got {type(key).__name__}",
                )
            key = str(key)
            if key in out:
                raise ConfigError(
                    name, key_node.start_mark.line + 1, format_path((*path, key)), "duplicate key"
                )
            out[key] = _walk(value_node, (*path, key), lines, ctor, name)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(item, (*path, i), lines, ctor, name) for i, item in enumerate(node.value)]
    return ctor.construct_object(node, deep=True)
