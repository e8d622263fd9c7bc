"""`mntui nodes`: the nodes a command of this job uses now, as a table or as JSON.

Here, not in nodesource.py: the listing reads a JobConfig, and nodesource.py sits below
the config, which reads the nodes through it.
"""

from __future__ import annotations

from typing import Any

from mntui.sessions.config import JobConfig, SourceKind


def listing(cfg: JobConfig) -> dict[str, Any]:
    """The nodes a command of this job uses now: ranks, processes, and where from."""
    src = cfg.nodes_from
    source: dict[str, Any] = {"kind": SourceKind.LIST.value, "detail": f"the list in {cfg.path}"}
    if src is not None:
        source = {"kind": src.kind.value, "spec": src.spec, "detail": src.detail}
        source |= {"recorded_by_run": src.run, "why": src.why} if src.run else {}
    nodes = [
        {"rank": n.rank, "node": n.name, "host": n.host, "nproc": cfg.nproc(n), "main": n.rank == 0}
        for n in cfg.nodes
    ]
    return {"job": cfg.job, "world_size": cfg.world_size, "source": source, "nodes": nodes}


def format_listing(data: dict[str, Any]) -> str:
    src = data["source"]
    lines = [
        f"job {data['job']}: {len(data['nodes'])} node(s), world size {data['world_size']}",
        f"nodes from {src['detail']}",
    ]
    if src.get("recorded_by_run"):
        lines.append(f"as recorded by run {src['recorded_by_run']}: {src['why']}")
    table = [("RANK", "NODE", "HOST", "NPROC", "ROLE")] + [
        (str(n["rank"]), n["node"], n["host"], str(n["nproc"]), "main" if n["main"] else "worker")
        for n in data["nodes"]
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    return "\n".join(line.rstrip() for line in lines)
