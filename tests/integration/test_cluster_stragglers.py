"""The straggler, caught by the cluster (issue 30): with `watch.where: cluster` each
sentinel samples its own ranks with py-spy every `sample_every` and sends the
coordinator one boolean per rank; the coordinator judges with the manager's one rule,
names the rank that holds the job while this machine is cut off from every node, tears
the job down under `on_slow: kill_all`, and `status` and `report` show it once this
machine is back as they show a here-watched run's. A clean job names nobody. The
straggler campaign's short version (bench/stragglers.py --quick, issue 40) runs here.

Real parts: sshd fake nodes, tmux, a 2-node torchrun job (gloo, CPU) whose rank 1
computes 3x longer a step (tests/jobs/straggler_train.py), the sentinel bundle on the
node's bare `python3 -I -S`, and the venv's py-spy on the nodes' PATH. "Cut off" is
every node's sshd stopped (tests/clusterwatch.py).
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
import straggle
from clusterwatch import NODES, cut_off, launched, nothing_left, run_dir, watchers
from fakecluster import FakeCluster, free_port, wait_for
from helpers import Cfg, tagged_anywhere

pytestmark = pytest.mark.integration

WATCH = "where: cluster, port: {port}, on_slow: kill_all, capture_budget: 0"


def job_file(cfg: Cfg, job: str, args: str) -> tuple[Path, int, int]:
    work = cfg.tmp / "work"
    work.mkdir(exist_ok=True)
    (work / "straggler_train.py").write_bytes(straggle.JOB_SCRIPT.read_bytes())
    port, wport = free_port(), free_port()
    body = straggle.job_yaml(job, list(NODES), port, work, args, WATCH.format(port=wport))
    return cfg.write(textwrap.dedent(body)), port, wport


def job_left(job: str) -> list[int]:
    return [p for p in tagged_anywhere(job) if p not in watchers(job, "sentinel")]


def test_the_cluster_names_the_slow_rank_while_cut_off_and_takes_the_job_down(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cstrag-slow"
    path, port, wport = job_file(cfg, job, "--work 0.1 --kind sleep --slow-rank 1 --slow-factor 3")
    launched(cfg, path, job, fake)
    coord = run_dir(fake, job, "node0") / "coord"
    t0 = time.monotonic()
    with cut_off(fake):
        wait_for(lambda: not job_left(job), 45, interval=0.1, what="the straggler's teardown")
        down = time.monotonic() - t0
    decision = json.loads((coord / "decision.json").read_text())
    print(f"trained -> named and torn down by the cluster alone in {down:.1f} s: {decision['why']}")
    assert (decision["node"], decision["state"]) == ("node1", "running"), decision
    assert decision["why"].startswith("straggler: rank 1 (node1) waits "), decision
    saved = json.loads((coord / "straggler.json").read_text())
    assert saved["finding"]["suspect"]["rank"] == 1, saved

    # the report first: it reads the coordinator's finding itself, no `status` before it
    report = cfg.mntui(path, "report", timeout=180)
    assert "Slow node (sampled while the job ran):" in report.stdout, report.stdout + report.stderr
    assert "  straggler: rank 1 (node1) waits" in report.stdout, report.stdout
    res = cfg.mntui(path, "status")
    line = next((x for x in res.stdout.splitlines() if x.startswith("straggler: ")), None)
    assert line is not None and "rank 1 (node1) waits" in line, res.stdout + res.stderr
    assert line.endswith("it holds the job"), line
    assert "node1 running: straggler: rank 1 (node1)" in res.stdout, res.stdout
    data = json.loads(cfg.mntui(path, "status", "--json").stdout)
    assert data["straggler"]["suspect"]["rank"] == 1, data
    nothing_left(fake, job, (port, wport))


def test_a_clean_job_watched_by_the_cluster_names_nobody(fake: FakeCluster, cfg: Cfg) -> None:
    job = "cstrag-clean"
    path, port, wport = job_file(cfg, job, "--work 0.1 --kind sleep")
    launched(cfg, path, job, fake)
    straggler = run_dir(fake, job, "node0") / "coord" / "straggler.json"

    def rounds() -> int:
        try:
            return int(json.loads(straggler.read_text())["finding"]["rounds"])
        except (OSError, ValueError, KeyError):
            return 0

    # 4 rounds of 10 s: every span the rule tries first judged, every rank sampled
    wait_for(lambda: rounds() >= 4, 90, interval=0.5, what="the coordinator's rounds")
    finding = json.loads(straggler.read_text())["finding"]
    ranks = {r["rank"]: r for r in finding["ranks"]}
    print(f"clean job: {finding['rounds']} rounds, per rank {ranks}")
    assert finding["suspect"] is None, finding
    assert set(ranks) == {0, 1} and all(r["samples"] >= 40 for r in ranks.values()), ranks
    assert job_left(job), "the job still runs: nobody was named"
    res = cfg.mntui(path, "status")
    assert not [x for x in res.stdout.splitlines() if x.startswith("straggler: ")], res.stdout
    assert cfg.mntui(path, "kill").returncode == 0
    nothing_left(fake, job, (port, wport))


def test_the_straggler_campaign_short_version() -> None:
    """bench/stragglers.py --quick: a rank turned 2x slower mid-run named, the same
    line in `status`; a clean job whose rank logs more names nobody (both at once)."""
    import re
    import subprocess
    import sys

    bench = Path(__file__).resolve().parents[2] / "bench" / "stragglers.py"
    res = subprocess.run(
        [sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    print(res.stdout)
    assert "| 0 | 2x worker by work, mid-run | " in res.stdout and "x) | " in res.stdout
    assert "| rank 1 (node1) | yes | yes |" in res.stdout  # named, and status says it so
    assert re.search(r"\| 1 \| clean, chatty \| [0-9.]+ \| - \| nobody \| yes \|", res.stdout)
    assert "precision 1/1" in res.stdout and "recall 1/1" in res.stdout
