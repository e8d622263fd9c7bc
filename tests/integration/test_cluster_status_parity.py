"""`status` of a run the cluster watches says all that an unwatched run's (polled
directly) says: the same keys of the same types in each node's row (snapshot_dict's:
processes, ports, the pane, load, memory...), from what its sentinels sent, and the
same columns in the table, on the cold path and the ordinary one alike (issue 30,
`watch.where: auto` by default).

Real parts: sshd fake nodes, tmux, the sentinels and the coordinator shipped and run on
the nodes' bare `python3`, one light 2-node job (plain python3 steps, listening on its
master port) launched twice: unwatched (`--no-watch`), then by the cluster.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from clusterwatch import launched, nothing_left
from fakecluster import FakeCluster, alive, free_port, wait_for
from fakecluster import tagged as tagged_on
from helpers import Cfg, steps_job

from mntui.sessions.errors import state_dir
from mntui.tui.cli.quickstatus import MEMO

pytestmark = pytest.mark.integration

CLUSTER_KEYS = {"connected", "step", "steps_per_second", "live_procs", "snapshot_age"}
HERE_HEAD = ["NODE", "RANK", "STATE", "GPUS", "PROCS", "PORTS", "OUTPUT", "STEP", "RTT"]


def status(cfg: Cfg, path: Path) -> dict[str, Any]:
    res = cfg.mntui(path, "status", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def kinds(value: object) -> object:
    """A value's shape: its JSON type, an object's keys with theirs, a list's items'."""
    if isinstance(value, dict):
        return {k: kinds(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted({json.dumps(kinds(v), sort_keys=True) for v in value})
    return type(value).__name__


def same_shapes(here: dict[str, Any], there: dict[str, Any]) -> list[str]:
    """Where a cluster row lacks a key of a here row, or holds another type (null,
    unknown on either side, matches anything)."""
    wrong = [f"{k}: missing" for k in here if k not in there]
    for k, v in here.items():
        w = there.get(k)
        if v is None or w is None or k == "procs":
            continue
        if kinds(v) != kinds(w) and not (isinstance(v, float) and isinstance(w, float)):
            wrong.append(f"{k}: {kinds(v)} here, {kinds(w)} there")
    procs = [p for row in (here, there) for p in row.get("procs") or []]
    shapes = {tuple(sorted(p)) for p in procs}
    if len(shapes) > 1:
        wrong.append(f"procs: keys differ {shapes}")
    return wrong


def fresh(cfg: Cfg, path: Path, job: str, port: int) -> dict[str, Any] | None:
    """The cluster's status once node0's snapshot shows the job: its processes (every
    one live, and all of them), its port."""
    data = status(cfg, path)
    n0 = data["nodes"][0]
    pids = {p["pid"] for p in n0["procs"]}
    ok = port in n0["ports"] and pids == set(tagged_on(job, "node0")) and alive(list(pids))
    return data if ok else None


def test_a_cluster_status_has_every_key_and_column_of_a_here_status(
    fake: FakeCluster, cfg: Cfg
) -> None:
    here_job, there_job = "parity-here", "parity-there"
    here_port, there_port, wport = free_port(), free_port(), free_port()
    here_path = cfg.write(steps_job(here_job, here_port), "h.yaml")
    there = steps_job(there_job, there_port, extra=f"watch: {{where: cluster, port: {wport}}}")
    there_path = cfg.write(there, "c.yaml")
    try:
        res = cfg.mntui(here_path, "launch", "--no-ui")  # polled directly by `status`
        assert res.returncode == 0, res.stdout + res.stderr
        launched(cfg, there_path, there_job, fake)
        wait_for(lambda: here_port in status(cfg, here_path)["nodes"][0]["ports"], 20, what="here")
        here = status(cfg, here_path)

        box: list[dict[str, Any]] = []  # the first fresh one: the cold path (the memo)

        def shown() -> bool:
            got = fresh(cfg, there_path, there_job, there_port)
            box.extend([got] if got is not None else [])
            return got is not None

        wait_for(shown, 30, what="node0's snapshot on the board")
        cold = box[0]
        (state_dir() / MEMO).unlink()  # no memo: the ordinary path (config, Cluster)
        ordinary = status(cfg, there_path)
        assert cold["via"] == ordinary["via"] == "coordinator" != here["via"]

        for got in (cold, ordinary):
            assert got.keys() >= here.keys(), here.keys() - got.keys()
            for h, c in zip(here["nodes"], got["nodes"], strict=True):
                assert not same_shapes(h, c), same_shapes(h, c)
                assert c.keys() >= CLUSTER_KEYS and c["reachable"] is True
                assert c["error"] is None and isinstance(c["rtt"], float)
                assert c["session"] is True and c["pane_dead"] is False and c["log_size"] > 0
                assert c["mem_total_mib"] > 0 and c["ncpu"] >= 1 and len(c["load"]) == 3
                assert c["state"] == "running" and c["procs"], c
        n0 = ordinary["nodes"][0]
        assert there_port in n0["ports"] and n0["snapshot_age"] is not None
        assert all(p["cmdline"] for p in n0["procs"]), n0["procs"]
        assert any("itertools" in p["cmdline"] for p in n0["procs"]), n0["procs"]
        assert n0["live_procs"] == len(n0["procs"])

        text = cfg.mntui(there_path, "status")
        assert text.returncode == 0, text.stdout + text.stderr
        head = next(line.split() for line in text.stdout.splitlines() if line.startswith("NODE"))
        assert head == [*HERE_HEAD, "SENTINEL", "DETAIL"], text.stdout
        row0 = next(line for line in text.stdout.splitlines() if re.match(r"node0 ", line))
        assert re.search(rf"\b{there_port}\b", row0) and "connected" in row0, text.stdout
    finally:
        for p in (here_path, there_path):
            cfg.mntui(p, "kill")
    nothing_left(fake, there_job, (there_port,))
    nothing_left(fake, here_job, (here_port,))
