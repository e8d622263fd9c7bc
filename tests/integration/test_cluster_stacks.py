"""A hang the cluster tears down keeps its stacks (issue 30): each sentinel runs the
launch's capture script for its node before it kills, and `mntui report`, once this
machine is back, shows them as the manager's own teardown would have.

Real parts: sshd fake nodes, tmux, a 2-node torchrun job (gloo, CPU), the sentinel
bundle on the node's bare `python3 -I -S`, and the venv's py-spy on the nodes' PATH.
"This machine cut off" is every node's sshd stopped (SIGSTOP of the listener and its
sessions), as in test_cluster_watch.py.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest
from clusterwatch import a_rank, cut_off, run_dir, watchers
from fakecluster import (
    FakeCluster,
    free_port,
    wait_for,
)
from helpers import Cfg, step_count, tagged_anywhere, torch_job

from mntui.sessions.runs import latest

pytestmark = pytest.mark.integration

FROZEN_AFTER = 2.0
WATCH = "watch: {{where: cluster, port: {port}, unreachable_after: 5, frozen_after: 2}}"


def test_a_frozen_rank_while_cut_off_leaves_its_stacks_for_report_and_status(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cs-frozen"
    port, wport = free_port(), free_port()
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), port, extra=WATCH.format(port=wport)))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0 and "watched by the cluster" in res.stdout, res.stdout + res.stderr
    wait_for(
        lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in ("node0", "node1")),
        90,
        what="both nodes training",
    )
    with cut_off(fake):
        rank = a_rank(job, "node1")
        os.kill(rank, signal.SIGSTOP)
        t0, stopped_at = time.monotonic(), time.time()
        wait_for(
            lambda: not [p for p in tagged_anywhere(job) if p not in watchers(job, "sentinel")],
            30,
            interval=0.05,
            what="the cluster taking the frozen job down",
        )
        down = time.monotonic() - t0
    saved = {n: json.loads((run_dir(fake, job, n) / "stacks.json").read_text()) for n in
             ("node0", "node1")}  # fmt: skip
    decision = json.loads((run_dir(fake, job, "node0") / "coord" / "decision.json").read_text())
    took = {n: s["seconds"] for n, s in saved.items()}
    print(
        f"rank SIGSTOP -> job down with stacks by the cluster alone: {down:.2f} s "
        f"(frozen_after {FROZEN_AFTER:g} s): decided after {decision['decided_at'] - stopped_at:.2f}"
        f" s, stacks taken in {took} s, kill reported "
        f"{decision['ended_at'] - decision['decided_at']:.2f} s after the decision"
    )
    assert all(s["error"] is None for s in saved.values()), saved
    assert saved["node1"]["decision"]["node"] == "node1", saved["node1"]["decision"]
    # a freeze's capture is bounded (teardown.FROZEN_BUDGET); measured here 0.09-0.26 s a
    # node, the kill after it 1-2 s on a loaded machine, stacks or not
    assert all(t <= 1.5 for t in took.values()), took

    res = cfg.mntui(path, "status")
    assert "node1 frozen" in res.stdout, res.stdout
    assert "stacks of 2 rank(s) were taken on the nodes at the teardown" in res.stdout, res.stdout

    res = cfg.mntui(path, "report", "--json", timeout=180)
    assert res.stdout, res.stderr
    report: dict[str, Any] = json.loads(res.stdout)
    # the teardown's report, saved at this first look with the stacks its sentinels took
    # before the kill: no snapshot's note ("not saved")
    assert "not saved" not in res.stderr, res.stderr
    rec = latest(job)
    assert rec is not None and (rec.dir / "report.json").exists()
    assert report["ending"] == "torn-down" and report["cause_node"] == "node1", report["headline"]
    assert report["headline"].startswith("rank 1 (node1) is stopped (state T)"), report["headline"]
    assert [(c["ranks"], c["nodes"]) for c in report["culprits"]] == [([1], ["node1"])], report
    stacks = {n["node"]: n["stacks"] for n in report["nodes"]}
    assert [s["state"] for s in stacks["node1"]] == ["T"], stacks
    assert stacks["node1"][0]["frames"] and stacks["node0"][0]["frames"], stacks
    text = cfg.mntui(path, "report", timeout=180).stdout
    assert "stacks of live ranks (py-spy, before the teardown):" in text, text
    assert "node1 rank 1 (pid" in text and "stopped (state T)" in text, text
