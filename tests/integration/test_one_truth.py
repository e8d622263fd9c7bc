"""One watch, one truth (issue 37): what mntui says of a run the cluster watched is what
the cluster recorded when it happened, on real sshd nodes with real torchrun.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from clusterwatch import SPARE_JOB, cut_off, runs_on, watchers
from fakecluster import FakeCluster, wait_for
from helpers import FAULTY, Cfg, faulty_job, free_port, tagged_anywhere
from test_cluster_faults import decision, told_on_failure
from test_cluster_restart import ALL, _fail_twice

from mntui.sessions.runs import latest

pytestmark = pytest.mark.integration


def test_the_rank_that_raised_is_named_first_not_the_first_torchrun_seen_exiting(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """Rank 1 on node1 raises; rank 0 on the main then fails on its closed gloo socket.
    Whichever torchrun the coordinator saw exit first, its decision names node1's rank 1
    and its error (the main was blamed in 60 of 61 looks before)."""
    job = "truth-blame"
    work = cfg.tmp / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(FAULTY, work / "faulty_train.py")
    port, wport = free_port(), free_port()
    watch = f"watch: {{where: cluster, port: {wport}}}"
    path = cfg.write(faulty_job(job, work, port, "--fail-rank 1 --fail-step 3 --how oom", watch))
    with told_on_failure(fake, job):
        res = cfg.mntui(path, "launch", "--no-ui", watch=True)
        assert res.returncode == 0, res.stdout + res.stderr
        d = wait_for(lambda: decision(fake, job), 120, what="the coordinator's decision")
        assert isinstance(d, dict)
        first = d.get("first")
        assert isinstance(first, dict), d
        assert (first["node"], first["rank"]) == ("node1", 1), first
        assert "CUDA out of memory" in first["why"] and first["cause"] == "cuda-oom", first
        wait_for(lambda: not tagged_anywhere(job), 30, what="the job gone")
        shown = cfg.mntui(path, "report")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        rec = latest(job)
        assert rec is not None and (rec.dir / "report.json").exists(), shown.stdout
        report = json.loads((rec.dir / "report.json").read_text())
        assert report["cause_node"] == "node1", report["headline"]
        assert report["headline"].startswith("node1 rank 1 failed first at "), report["headline"]
        # when it broke, as the coordinator saw it: not when the report was asked for
        assert d["decided_at"] - 5 < report["first_at"] <= d["decided_at"], (report, d)
        assert shown.stdout.startswith(report["headline"]), shown.stdout
        status = cfg.mntui(path, "status").stdout
        assert "node1 rank 1" in status and "node0 failed" not in status, status
        again = cfg.mntui(path, "report", "--json")  # saved once, never rebuilt
        assert json.loads(again.stdout)["headline"] == report["headline"]


def test_a_kill_after_a_restart_this_machine_never_saw_names_the_spare_and_counts_it(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """node1 fails twice and the spare node2 takes its rank while this machine is cut
    off; then `mntui kill`, with no `status` before it: the kill names node2 and counts
    what the coordinator stopped there, `status` after it shows the chain without an
    internal error, and `history` counts both failures (issue 37, item 3)."""
    job = "truth-kill"
    port, wport = free_port(), free_port()
    path = cfg.write(SPARE_JOB.format(job=job, port=port, wport=wport))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: len(watchers(job, "sentinel")) == 3, 20, what="3 sentinels")
    with told_on_failure(fake, job), cut_off(fake, ALL):
        _fail_twice(job, "node1", "node0")
        wait_for(lambda: runs_on(job, "node2"), 60, what="attempt 2 on the spare node2")
        third = next(iter(runs_on(job, "node2")))
        wait_for(lambda: third in runs_on(job, "node0"), 30, what="attempt 2 on node0")
    res = cfg.mntui(path, "kill")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert re.search(r"node2\[1\].*stopped", out), out
    done = re.search(r"clean: (\d+) process\(es\) of \S+ stopped on (\d+) node\(s\)", out)
    assert done is not None and int(done[2]) >= 2, out
    assert "node0" in out, out
    wait_for(lambda: not tagged_anywhere(job), 20, what="every process of the job gone")
    status = cfg.mntui(path, "status")
    said = status.stdout + status.stderr
    assert "Error" not in said and "traceback" not in said, said
    hist = cfg.mntui(path, "history").stdout
    assert "2 failure(s)" in hist, hist
    assert "attempt 1 (" in hist and "attempt 2 (" in hist, hist  # one numbering, from 1
