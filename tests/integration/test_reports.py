"""Failure reports on real sshd nodes with real torchrun, watched by the cluster: which
rank broke first, and why, with the stacks of hung ranks its sentinels took before the
teardown; saved at the first look after the coordinator's end (watch/mirror.py:
`mntui report` here, as a user's first look would)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from clusterwatch import run_dir
from fakecluster import FakeCluster, cmdline, tagged, wait_for
from helpers import (
    FAULTY,
    Cfg,
    faulty_job,
    free_port,
    freeze_a_worker,
    line_of,
    on_cluster,
    step_count,
)
from hookserver import serving

from mntui.sessions.runs import latest


def launch_faulty(fake: FakeCluster, cfg: Cfg, job: str, args: str, extra: str = "") -> Path:
    work = cfg.tmp / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(FAULTY, work / "faulty_train.py")
    path = cfg.write(faulty_job(job, work, free_port(), args, on_cluster(extra)))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "watched by the cluster" in res.stdout, res.stdout
    return path


def decided(fake: FakeCluster, job: str) -> dict[str, Any] | None:
    """The coordinator's decision.json on the main, once complete (its `ended_at` is
    written after the kills, or at the job's own end)."""
    try:
        d = json.loads((run_dir(fake, job, "node0") / "coord" / "decision.json").read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and "ended_at" in d else None


def saved_report(
    fake: FakeCluster, cfg: Cfg, path: Path, job: str, timeout: float = 60
) -> dict[str, Any]:
    """The coordinator's end, then the report the first look after it saves (`mntui
    report`: watch/mirror.py), read back as saved."""
    wait_for(lambda: decided(fake, job), timeout, interval=0.2, what=f"the end of {job}")

    def ready() -> dict[str, Any] | None:
        cfg.mntui(path, "report")
        rec = latest(job)
        saved = rec.dir / "report.json" if rec and not rec.status.is_live else None
        return json.loads(saved.read_text()) if saved and saved.exists() else None

    report = wait_for(ready, 60, interval=0.5, what=f"the report of {job} saved")
    assert isinstance(report, dict)
    return report


def node_of(report: dict[str, Any], node: str) -> dict[str, Any]:
    return next(n for n in report["nodes"] if n["node"] == node)


def test_oom_on_node1_is_named_first_and_node0_is_a_consequence(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "room"
    with serving() as hook:
        path = launch_faulty(
            fake, cfg, job, "--fail-rank 1 --fail-step 3 --how oom",
            extra=f"notify: {{webhook: '{hook.url}', on: [teardown, failed]}}",
        )  # fmt: skip
        report = saved_report(fake, cfg, path, job)
        posts = wait_for(hook.bodies, 20, what="the webhook's POST")
    assert isinstance(posts, list) and len(posts) == 1, posts
    assert posts[0]["event"] in ("teardown", "failed") and posts[0]["job"] == job
    # posted by the coordinator when it decided: the first failure it named, the report's
    summary = posts[0]["summary"]
    assert "node1" in summary and "CUDA out of memory" in summary, summary
    node1 = node_of(report, "node1")
    assert report["cause_node"] == "node1", report["headline"]
    assert node1["finding"]["cause"] == "cuda-oom", node1["finding"]
    assert node1["finding"]["location"] == f"faulty_train.py:{line_of('raise RuntimeError(')}"
    assert report["headline"].startswith("node1 rank 1 failed first at "), report["headline"]
    assert "CUDA out of memory" in report["headline"]
    assert any(c.startswith("node0 ") for c in report["consequences"]), report
    wait_for(lambda: not tagged(job), 30, what="the job gone")
    text = (latest(job).dir / "report.txt").read_text()  # type: ignore[union-attr]
    assert text.splitlines()[0] == report["headline"] and "consequences (not causes):" in text
    shown = cfg.mntui(path, "report").stdout  # the report, then the chain's seff-style line
    assert shown.startswith(text) and shown[len(text) :].startswith("room chain "), shown
    assert json.loads(cfg.mntui(path, "report", "--json").stdout)["headline"] == report["headline"]
    status = cfg.mntui(path, "status").stdout
    assert f"cause: {report['headline']}" in status, status
    print(f"\nREPORT (oom):\n{text[:1500]}")


@pytest.mark.parametrize("budget", [8, 0])
def test_frozen_worker_report_has_stacks_and_teardown_waits_at_most_the_budget(
    fake: FakeCluster, cfg: Cfg, budget: int
) -> None:
    job = f"rfrozen{budget}"
    path = launch_faulty(
        fake, cfg, job, "", extra=f"watch: {{frozen_after: 1, capture_budget: {budget}}}"
    )
    freeze_a_worker(fake, job, "faulty_train.py")
    frozen_at = time.time()
    wait_for(lambda: decided(fake, job), 40, what="the teardown done")
    down = time.time() - frozen_at
    report = saved_report(fake, cfg, path, job, 30)
    stacks = {s["node"]: s for n in report["nodes"] for s in n["stacks"]}
    timing = f"\nMEASURED frozen worker, capture_budget {budget}: whole job down {down:.2f}s"
    if budget == 0:
        assert not stacks
        assert report["headline"].startswith("node1 (node rank 1) froze first")
        print(timing)
        return
    assert stacks["node1"]["state"] == "T" and stacks["node1"]["rank"] == 1
    live = stacks["node0"]
    assert live["rank"] == 0 and live["frames"], live
    text = (latest(job).dir / "report.txt").read_text()  # type: ignore[union-attr]
    all_reduce = f"faulty_train.py:{line_of('dist.all_reduce(metric)')}"
    if any(f["name"] == "all_reduce" for f in live["frames"]):
        assert f"node0 rank 0 (pid {live['pid']}): waiting in `all_reduce` ({all_reduce})" in text
    else:  # a loaded host: the stack came before the live rank reached the collective
        assert f"node0 rank 0 (pid {live['pid']}): in `" in text, text
    assert f"node1 rank 1 (pid {stacks['node1']['pid']}): stopped (state T)" in text
    assert re.fullmatch(r"rank 1 stopped at step \d+; rank 0 reached \d+", report["progress"]) or (
        re.fullmatch(r"ranks? .* at steps? \d+(–\d+)?", report["progress"])  # not 10 s yet
    ), report["progress"]
    # With stacks, the conclusion leads (issue 20); what the watchdog saw follows it.
    assert report["headline"].startswith("rank 1 (node1) is stopped (state T)"), report["headline"]
    assert f"rank 0 (node0) waits in `all_reduce` ({all_reduce})" in report["headline"]
    assert report["watchdog"].startswith("node1 (node rank 1) froze first"), report["watchdog"]
    assert [(c["ranks"], c["nodes"]) for c in report["culprits"]] == [([1], ["node1"])]
    print(f"{timing}\nREPORT (frozen):\n{text}")


@pytest.mark.parametrize(
    ("how", "expect"),
    [
        ("exit3", r"exit(code)? 3|exitcode 3|exit code 3"),
        ("segv", r"[Ss]egmentation fault|SIGSEGV"),
    ],
)
def test_exit_code_and_segfault_give_the_right_cause(
    fake: FakeCluster, cfg: Cfg, how: str, expect: str
) -> None:
    job = f"r{how}"
    path = launch_faulty(fake, cfg, job, f"--fail-rank 1 --fail-step 2 --how {how}")
    report = saved_report(fake, cfg, path, job)
    assert report["cause_node"] == "node1", report["headline"]
    assert re.search(expect, report["cause"]), report["cause"]
    if how == "segv":  # faulthandler (PYTHONFAULTHANDLER=1 by default) named the line
        assert (
            f"faulty_train.py:{line_of('os.kill(os.getpid(), signal.SIGSEGV)')}" in report["cause"]
        )


def test_launcher_sigkill_is_named(fake: FakeCluster, cfg: Cfg) -> None:
    job = "rlauncher"
    path = launch_faulty(fake, cfg, job, "")
    wait_for(lambda: step_count(fake.node("node1").log(job)) >= 1, 60, what="node1 training")
    launcher = next(p for p in tagged(job, "node1") if "torch.distributed.run" in cmdline(p))
    os.kill(launcher, signal.SIGKILL)
    report = saved_report(fake, cfg, path, job)
    assert report["cause_node"] == "node1", report["headline"]
    assert re.match(r"node1 \(node rank 1\) (lost its launcher|failed) first", report["headline"])
    assert "launcher" in report["cause"] or "SIGKILL" in report["cause"], report["cause"]


def test_flight_recorder_dumps_of_this_run_are_collected(fake: FakeCluster, cfg: Cfg) -> None:
    """NCCL writes its Flight Recorder dumps to TORCH_FR_DUMP_TEMP_FILE<rank>; there is no
    GPU here, so the job writes the files itself. One left by an earlier job is not taken."""
    fr = cfg.tmp / "fr"
    fr.mkdir()
    (fr / "trace_9").write_bytes(b"from another job")
    path = cfg.write(f"""
    job: rflight
    nodes: [node0, node1]
    env: {{TORCH_NCCL_TRACE_BUFFER_SIZE: "2000", TORCH_FR_DUMP_TEMP_FILE: "{fr}/trace_"}}
    command: >-
      printf 'dump of %s' {{node}} >"$TORCH_FR_DUMP_TEMP_FILE$NODE_RANK";
      echo "node {{node}} up"; if [ {{node_rank}} = 1 ]; then sleep 2; exit 3; fi; exec sleep 300
    launch: {{ready: log, ready_pattern: "up", ready_timeout: 20}}
    kill: {{grace: 2}}
    {on_cluster()}
    """)
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0
    report = saved_report(fake, cfg, path, "rflight")
    rec = latest("rflight")
    assert rec is not None
    fr_dir = rec.dir / "flight-recorder"
    got = sorted(p.relative_to(fr_dir).as_posix() for p in fr_dir.rglob("trace_*"))
    # Both fake nodes share one /tmp: each takes the dumps written since its own start.
    assert {"node0/trace_0", "node1/trace_1"} <= set(got), got
    assert not [g for g in got if g.endswith("trace_9")], got
    assert (rec.dir / "flight-recorder" / "node1" / "trace_1").read_bytes() == b"dump of node1"
    assert len(report["flight_records"]) == len(got) and report["cause_node"] == "node1"


def test_a_slow_node_is_reported_and_left_running(fake: FakeCluster, cfg: Cfg) -> None:
    """A straggler is flagged (notify only): node1 steps at a tenth of node0's rate. The
    coordinator journals it; the notify command is this machine's, run at its next look
    (`status`) when the main could not (watch/clusternotify.py)."""
    told = cfg.tmp / "told"
    path = cfg.write(f"""
    job: rslow
    nodes: [node0, node1]
    env: {{PERIOD: "0.1"}}
    overrides: {{node1: {{env: {{PERIOD: "1"}}}}}}
    command: >-
      i=0; while :; do i=$((i+1)); echo "step $i loss 0.5"; sleep "$PERIOD"; done
    launch: {{ready: log, ready_pattern: "step", ready_timeout: 20}}
    {on_cluster("watch: {slow_fraction: 0.5, slow_after: 2}")}
    notify: {{command: 'printf "%s|%s\\n" "$MNTUI_EVENT" "$MNTUI_SUMMARY" >>{told}', on: [slow]}}
    kill: {{grace: 2}}
    """)
    assert cfg.mntui(path, "launch", "--no-ui", watch=True).returncode == 0

    def told_once() -> bool:
        cfg.mntui(path, "status")  # a look: what the coordinator could not send, sent once
        return told.exists() and "slow|node1 is slow" in told.read_text()

    wait_for(told_once, 60, interval=1.0, what="the slow notification")
    lines = told.read_text().splitlines()
    assert len(lines) == 1 and "node1 is slow" in lines[0], lines  # once an episode, not node0
    status = cfg.mntui(path, "status").stdout
    assert re.search(r"node1\s+1\s+running", status), status
    assert tagged("rslow", "node0") and tagged("rslow", "node1")  # notify only: still running
    assert cfg.mntui(path, "kill").returncode == 0
