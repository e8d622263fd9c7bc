"""Where a job runs, as its records say: every node any attempt of its chain used.

The config names the nodes of a new launch only. Once a run exists, a restart may
have swapped a spare in, an allocation may have moved, or the file may have been
edited since: a kill or a status built from the config would miss the spare and say
`clean` while the job runs on. So every verb that acts on a running job (kill,
status, logs, attach, cleanup, report and the app) asks `run_config` for a config
whose nodes are the chain's, and the config only lends how to reach them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mntui.sessions.errors import UsageError, state_dir
from mntui.sessions.runs import RUN_ID_RE, NodeRecord, RunRecord, latest, load_run

from .sparenote import spares_of

if TYPE_CHECKING:  # a status reads chains without loading the config's checks
    from mntui.sessions.config import JobConfig, NodeSpec

__all__ = ["ChainView", "chain_of", "check_nodes", "idle_spares", "run_config"]


@dataclass(frozen=True)
class ChainView:
    """The runs of one chain, first attempt first."""

    runs: tuple[RunRecord, ...]

    @property
    def latest(self) -> RunRecord:
        return self.runs[-1]

    @property
    def first(self) -> RunRecord:
        return self.runs[0]

    @property
    def live(self) -> bool:
        """The chain may hold processes, or is about to (a backoff, a kill under way). An
        earlier attempt stays `restarting` once its successor exists: the latest speaks."""
        return self.latest.status.is_live or self.latest.status.is_stopping

    def nodes(self) -> tuple[NodeRecord, ...]:
        """The latest attempt's nodes in rank order, then every node only an earlier
        attempt used (a replaced culprit may come back with its processes)."""
        seen = {n.node: n for n in self.latest.nodes}
        for run in reversed(self.runs[:-1]):
            for n in run.nodes:
                seen.setdefault(n.node, n)
        return tuple(seen.values())


def _runs_of(job: str, chain: str) -> list[RunRecord]:
    out = []
    for path in sorted((state_dir() / job).glob("*/run.json")):
        if not RUN_ID_RE.match(path.parent.name):
            continue
        rec = load_run(job, path.parent.name)
        if rec is not None and (rec.chain or rec.run_id) == chain:
            out.append(rec)
    return sorted(out, key=lambda r: (r.attempt, r.created_at))


def chain_of(job: str, record: RunRecord | None = None) -> ChainView | None:
    """The chain of `record` (default: the job's latest run), read from disk now."""
    record = record if record is not None else latest(job)
    if record is None:
        return None
    runs = _runs_of(job, record.chain or record.run_id)
    if not any(r.run_id == record.run_id for r in runs):
        runs.append(record)
    return ChainView(tuple(runs))


def _spec(cfg: JobConfig, n: NodeRecord) -> NodeSpec:
    """The node as the config knows it (nodes or spares); a node the config no longer
    names is still reached at the host its run recorded."""
    known = {s.name: s for s in (*cfg.nodes, *cfg.spares)}
    spec = known.get(n.node)
    if spec is None:
        template = cfg.nodes[0]
        return replace(template, name=n.node, host=n.host, rank=n.rank, nproc_per_node=n.nproc)
    return replace(spec, host=n.host, rank=n.rank)


def run_config(cfg: JobConfig, view: ChainView | None) -> JobConfig:
    """`cfg` with the chain's nodes, main and port: what a kill or a status must reach.
    A main that moved (a spare took its place) takes the master with it, as in a swap;
    the watch is the one the records say (a coordinator's port, or none: `where: auto`
    in the config decides nothing about a run already launched with `--no-watch`).
    With no recorded run the config is all there is."""
    if view is None:
        return cfg
    from mntui.sessions.config import WatchWhere  # the caller has loaded the config

    rec = view.latest
    nodes = tuple(_spec(cfg, n) for n in view.nodes())
    main = rec.main.node if rec.nodes else nodes[0].name
    master = cfg.master_addr if main == cfg.main else None
    ports = tuple(p for p in cfg.ports if p != rec.master_port)
    port = rec.watch_port  # a cluster chain's attempts each carry their coordinator's
    where = WatchWhere.HERE if port is None else WatchWhere.CLUSTER
    return replace(
        cfg,
        nodes=nodes,
        main=main,
        master_addr=master,
        master_port=rec.master_port,
        ports=ports,
        watch=replace(cfg.watch, where=where, port=port),
    )


def idle_spares(cfg: JobConfig, view: ChainView | None) -> tuple[NodeSpec, ...]:
    """The spares the chain's launch started an idle sentinel on (sparestart.py) and no
    attempt of it ran on: a kill without a coordinator to stop them reaches them too."""
    if view is None:
        return ()
    used = {n.node for n in view.nodes()}
    return tuple(_spec(cfg, n) for name, n in spares_of(view.first).items() if name not in used)


def check_nodes(cfg: JobConfig, names: list[str] | tuple[str, ...]) -> list[str]:
    """Node names typed by a user, checked against where the job runs."""
    known = [n.name for n in cfg.nodes]
    for name in names:
        if name not in known:
            raise UsageError(f"unknown node {name!r}; nodes are {', '.join(known)}")
    return list(names)
