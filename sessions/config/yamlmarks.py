"""YAML loading that remembers where every value came from.

PyYAML's `safe_load` throws away line numbers and silently keeps the last of two
duplicate keys. A config error that says `nodes[1].env` without a line sends the
user hunting, and a silently dropped duplicate launches the wrong job, so we walk
the composed node tree ourselves. Walking it ourselves also lets us refuse what
`safe_load` would turn into a traceback or a hang (a self-containing alias, an alias
bomb, a Python tag) and keep each scalar's text as written, because YAML 1.1 reads
`010` as 8 and `1:30` as 90, and an environment variable must reach the job as typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mntui.sessions.errors import UsageError

Path_ = tuple[str | int, ...]

MAX_BYTES = 1 << 20  # a job config is a page of YAML; this is a thousand pages
MAX_COPIES = 100_000  # values that aliases copy: a 300-byte alias bomb builds millions
MAX_DEPTH = 32  # a config nests four levels deep

_STD = "tag:yaml.org,2002:"
_SCALAR_TAGS = frozenset(_STD + t for t in ("str", "int", "float", "bool", "null", "timestamp"))
_MERGE = _STD + "merge"
# What the YAML reader refuses, found first so the error can name the line.
_UNPRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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
    texts: dict[Path_, str] = field(default_factory=dict)  # each scalar as written

    def line(self, path: Path_) -> int | None:
        # A missing key has no line of its own: point at the nearest parent.
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path)

    def text(self, path: Path_) -> str | None:
        """The scalar at `path` before YAML 1.1 typed it (`010`, not 8)."""
        return self.texts.get(path)

    def error(self, path: Path_, message: str) -> ConfigError:
        return ConfigError(self.file, self.line(path), format_path(path), message)


def load(path: Path) -> Document:
    name = str(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(name, None, "", f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(name, None, "", "larger than 1 MiB: not a job config")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        message = f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}): save the file as UTF-8"
        raise ConfigError(name, line, "", message) from None
    return loads(text, name)


def loads(text: str, name: str = "<config>") -> Document:
    if len(text) > MAX_BYTES:
        raise ConfigError(name, None, "", "larger than 1 MiB: not a job config")
    bad = _UNPRINTABLE.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        message = f"control character {ord(bad.group()):#04x} is not allowed in YAML"
        raise ConfigError(name, line, "", message + " (write it as an escape in double quotes)")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "cannot parse"
        raise ConfigError(name, where, "", f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(name, None, "", f"invalid YAML: {first}") from None
    except RecursionError:
        raise ConfigError(name, None, "", "invalid YAML: nested too deeply") from None
    if root is None:
        return Document(name, None, {})
    walker = _Walker(name)
    data = walker.walk(root, ())
    return Document(name, data, walker.lines, walker.texts)


def _show_tag(tag: str) -> str:
    return "!!" + tag[len(_STD) :] if tag.startswith(_STD) else tag


class _Walker:
    """Builds plain data from the node tree, with a budget and without following cycles."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: dict[Path_, int] = {}
        self.texts: dict[Path_, str] = {}
        self.seen: set[int] = set()  # ids of the nodes walked once
        self.copies = 0  # nodes walked again, through an alias or a merge
        self.open: set[int] = set()  # ids of the collections being walked: a cycle's nodes
        self.ctor = yaml.SafeLoader("")

    def error(self, node: yaml.Node, path: Path_, message: str) -> ConfigError:
        return ConfigError(self.name, node.start_mark.line + 1, format_path(path), message)

    def spend(self, node: yaml.Node, path: Path_) -> None:
        """Count what aliases copy: what the file spells out is bounded by its size."""
        if id(node) not in self.seen:
            self.seen.add(id(node))
        else:
            self.copies += 1
            if self.copies > MAX_COPIES:
                message = f"aliases expand to more than {MAX_COPIES} values (an alias bomb?)"
                raise self.error(node, path, message)
        if len(path) > MAX_DEPTH:
            raise self.error(node, path, f"nested more than {MAX_DEPTH} levels deep")

    def walk(self, node: yaml.Node, path: Path_) -> Any:
        self.spend(node, path)
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if id(node) in self.open:
            raise self.error(node, path, "an alias inside its own anchor (a cycle)")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                self.expect_tag(node, path, _STD + "map")
                return {k: self.walk(v, (*path, k)) for k, v in self.pairs(node, path).items()}
            self.expect_tag(node, path, _STD + "seq")
            return [self.walk(item, (*path, i)) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def expect_tag(self, node: yaml.Node, path: Path_, *tags: str) -> None:
        if node.tag not in tags:
            raise self.error(
                node, path, f"tag {_show_tag(node.tag)} is not allowed: plain YAML only"
            )

    def scalar(self, node: yaml.ScalarNode, path: Path_) -> Any:
        self.expect_tag(node, path, *_SCALAR_TAGS)
        self.texts[path] = node.value
        try:
            return self.ctor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            shown = node.value if len(node.value) <= 40 else node.value[:37] + "..."
            raise self.error(node, path, f"cannot read {shown!r}: {exc}") from None

    def pairs(self, node: yaml.MappingNode, path: Path_) -> dict[str, yaml.Node]:
        """Key → value node, with `<<` merges: own keys win, then earlier merged ones."""
        own: dict[str, yaml.Node] = {}
        merged: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            self.spend(key_node, path)
            if key_node.tag == _MERGE:
                for source in self.merge_sources(value_node, path):
                    for key, value in self.pairs_of_source(source, path).items():
                        merged.setdefault(key, value)
                continue
            key = self.key(key_node, path)
            if key in own:
                raise self.error(key_node, (*path, key), "duplicate key")
            own[key] = value_node
        return {**merged, **own}

    def pairs_of_source(self, source: yaml.MappingNode, path: Path_) -> dict[str, yaml.Node]:
        if id(source) in self.open:
            raise self.error(source, path, "an alias inside its own anchor (a cycle)")
        self.open.add(id(source))
        try:
            return self.pairs(source, path)
        finally:
            self.open.discard(id(source))

    def merge_sources(self, node: yaml.Node, path: Path_) -> list[yaml.MappingNode]:
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        if not all(isinstance(x, yaml.MappingNode) for x in items):
            raise self.error(node, path, "a merge (<<) takes a mapping or a list of mappings")
        return list(items)

    def key(self, node: yaml.Node, path: Path_) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, path, "keys must be strings, got a mapping or a list")
        self.expect_tag(node, path, *_SCALAR_TAGS)
        return str(node.value)  # as written: `ON` stays ON, `010` stays 010
