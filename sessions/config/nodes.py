"""The nodes of a job: `nodes:` as a node set (g[369-376]), a list of names, node sets
and mappings, or a hostfile or Slurm job; `overrides:` by node name; each one read into
a NodeSpec with the shared top-level keys.

A node name reaches SSH, tmux and shells, and a node set can expand to millions of
names, so both are checked here, before anything is expanded or run, by the rules of
nodenames.py. A config with a plain list never imports nodesource: loading it calls no
Slurm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ClusterShell.NodeSet import NodeSet, NodeSetException

from . import checks as ck
from .nodenames import MAX_NODES, NODE_RE, nodeset_bound
from .settings import NodeSpec
from .yamlmarks import Document, Path_, format_path

if TYPE_CHECKING:
    from .nodesource import NodeSource

NODE_KEYS = ck.keys(NodeSpec)
SHARED_KEYS = ck.keys(NodeSpec, "shared")

# A node before checking: its name, its own raw keys, and where it was written.
Entry = tuple[str, dict[str, Any], Path_]


def node_source(doc: Document, value: Any, job: str) -> tuple[NodeSource | None, Any]:
    """`nodes: {hostfile: PATH}` or `{slurm: JOBID | auto}`: read now (or as the job's
    run recorded them), as a list of node mappings; a plain list passes through, and
    never loads nodesource (nor calls Slurm)."""
    if not isinstance(value, dict):
        return None, value
    from . import nodesource

    source = nodesource.resolve(doc, value, ("nodes",), job)
    listed = [
        {"name": n.name, **({"nproc_per_node": n.slots} if n.slots else {})} for n in source.nodes
    ]
    return source, listed


def node_specs(
    doc: Document,
    top: Mapping[str, Any],
    entries: list[Entry],
    *,
    overrides: bool = True,
    lenient: bool = False,
) -> list[NodeSpec]:
    """`lenient`: nodes from a hostfile or Slurm differ from one read to the next, so
    overrides of nodes not given this time are skipped, not refused."""
    shared = ck.read(doc, NodeSpec, top, (), SHARED_KEYS)
    names = [name for name, _, _ in entries]
    named = _overrides(doc, top, names, lenient) if overrides else {}
    checks = ck.checks(NodeSpec)
    merging = ck.keys(NodeSpec, "merge")
    specs: list[NodeSpec] = []
    for name, raw, path in entries:
        given = {k: (x, (*path, k)) for k, x in raw.items()}
        given.update(named.get(name, {}))
        own = {k: checks[k](doc, x, p) for k, (x, p) in given.items() if x is not None}
        values = {**shared, **own}
        for k in merging & own.keys() & shared.keys():
            values[k] = {**shared[k], **own[k]}
        values.setdefault("host", name)
        specs.append(NodeSpec(**{**values, "name": name, "rank": len(specs)}))
    return specs


def _overrides(
    doc: Document, top: Mapping[str, Any], names: list[str], lenient: bool = False
) -> dict[str, dict[str, tuple[Any, Path_]]]:
    raw = top.get("overrides")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise doc.error(("overrides",), f"expected a mapping, got {ck.kind(raw)}")
    out: dict[str, dict[str, tuple[Any, Path_]]] = {}
    for name, o in raw.items():
        where: Path_ = ("overrides", name)
        if name not in names and lenient:
            ck.mapping(doc, o, where, NODE_KEYS - {"name"})
            continue
        if name not in names:
            raise doc.error(where, f"unknown node {name!r}; nodes are {NodeSet.fromlist(names)}")
        m = ck.mapping(doc, o, where, NODE_KEYS - {"name"})
        out[name] = {k: (x, (*where, k)) for k, x in m.items()}
    return out


def node_entries(doc: Document, value: Any, key: str = "nodes") -> list[Entry]:
    """Nodes as `g[369-376]`, a list of names/node sets, or mappings with overrides."""
    items: list[tuple[Any, Path_]]
    if isinstance(value, str):
        items = [(value, (key,))]
    elif isinstance(value, list) and value:
        items = [(x, (key, i)) for i, x in enumerate(value)]
    else:
        raise doc.error(
            (key,),
            f"expected a node set like 'g[369-376]', a non-empty list, {{hostfile: PATH}} "
            f"or {{slurm: JOBID}}, got {ck.kind(value)}",
        )
    out: list[Entry] = []
    seen: dict[str, Path_] = {}
    for item, path in items:
        for name, raw in _node_item(doc, item, path, MAX_NODES - len(out)):
            if not NODE_RE.match(name):
                message = f"bad node name {name!r}: use letters, digits, '.', '-' and '_'"
                raise doc.error(path, message)
            if name in seen:
                raise doc.error(path, f"duplicate node {name!r}: also {_where(doc, seen[name])}")
            seen[name] = path
            out.append((name, raw, path))
        if len(out) > MAX_NODES:
            raise doc.error(path, _TOO_MANY)
    return out


_TOO_MANY = f"more than {MAX_NODES} nodes (mntui holds one SSH connection per node)"


def _where(doc: Document, path: Path_) -> str:
    line = doc.line(path)
    return format_path(path) + (f" (line {line})" if line is not None else "")


def _node_item(
    doc: Document, item: Any, path: Path_, room: int
) -> list[tuple[str, dict[str, Any]]]:
    """One entry of `nodes`, as (name, own keys) pairs; a node set of more than `room`
    nodes is refused before it is expanded."""
    if isinstance(item, dict):
        raw = ck.mapping(doc, item, path, NODE_KEYS)
        if "name" not in raw:
            raise doc.error(path, "a node mapping needs a 'name'")
        name = ck.text(doc, raw["name"], (*path, "name"))
        return [(name, {k: x for k, x in raw.items() if k != "name"})]
    if not isinstance(item, str):
        raise doc.error(path, f"expected a node name or a mapping, got {ck.kind(item)}")
    if nodeset_bound(item) > room:  # before ClusterShell spends minutes on g[1-100000000]
        raise doc.error(path, _TOO_MANY)
    try:
        names = list(NodeSet(item))
    except NodeSetException as exc:
        raise doc.error(path, f"bad node set {item!r}: {exc}") from None
    if not names:
        raise doc.error(path, f"node set {item!r} names no node")
    return [(name, {}) for name in names]
