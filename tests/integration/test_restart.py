"""Bringing a failed job back by itself, on real sshd nodes, the cluster's coordinator
deciding: backoff, give-up, a frozen worker, spares, and a user's kill during the
backoff. Real torchrun where torchrun's own part is tested (a worker frozen in its
all-reduce, torchrun's exit code for `not_on`); the chain's own rules run on
tests/jobs/faulty_steps.py, the same failures without torch (an attempt up in a second,
not five). What the coordinator did is read as this machine learns it: `status` syncs
the records (watch/mirror.py), chain.json on the main says its decisions."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from fakecluster import FakeCluster, cmdline, tagged, wait_for
from helpers import REPO, Cfg, free_port, step_count, tagged_anywhere

from mntui.sessions.runs import RunRecord, latest, load_run

FAULTY = REPO / "tests" / "jobs" / "faulty_train.py"
LIGHT = REPO / "tests" / "jobs" / "faulty_steps.py"
TORCHRUN = (
    "exec python3 -m torch.distributed.run --nnodes={nnodes} --node_rank={node_rank}\n"
    "      --nproc_per_node=1 --master_addr={master_addr} --master_port={master_port}\n"
    "      faulty_train.py"
)
STEPS = "exec python3 faulty_steps.py --rank {node_rank}"


def job_yaml(
    job: str,
    work: Path,
    args: str,
    extra: str,
    watch: str,
    light: bool = False,
    listen: bool = True,
) -> str:
    """`light`: faulty_steps.py, no torch (the chain's rules), its rank 0 on the master
    port (ready: port) or, not `listen`, on no port (ready: its first line); else
    faulty_train.py under real torchrun. Watched by the cluster, its coordinator on a port
    of its own."""
    command = STEPS + (" --port {master_port}" if listen else "") if light else TORCHRUN
    ready = "" if listen or not light else "ready: log, ready_pattern: '^rank 0 up', "
    return f"""
    job: {job}
    nodes: [node0, node1]
    workdir: {work}
    master_port: {free_port()}
    env: {{OMP_NUM_THREADS: "1"}}
    command: >-
      {command} --interval 0.2 {args}
    launch: {{{ready}ready_timeout: 90}}
    kill: {{grace: 2}}
    watch: {{where: cluster, port: {free_port()}, capture_budget: 0{watch}}}
    {extra}
    """


def start(
    cfg: Cfg,
    job: str,
    args: str,
    extra: str,
    watch: str = "",
    light: bool = False,
    listen: bool = True,
) -> Path:
    work = cfg.tmp / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(FAULTY, work / "faulty_train.py")
    shutil.copy(LIGHT, work / "faulty_steps.py")
    extra = extra.replace("\n", "\n    ")
    path = cfg.write(job_yaml(job, work, args, extra, watch, light, listen))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return path


def chain(cfg: Cfg, job: str, path: Path | None = None) -> list[RunRecord]:
    """The chain's records after a look (`status` of the config at `path`, default
    job.yaml: the records' sync)."""
    cfg.mntui(path or cfg.tmp / "job.yaml", "status")
    rec = latest(job)
    if rec is None or rec.chain is None:
        return []
    runs = [r for r in (load_run(job, p.name) for p in rec.dir.parent.iterdir()) if r]
    return sorted((r for r in runs if r.chain == rec.chain), key=lambda r: r.attempt)


def statuses(cfg: Cfg, job: str) -> list[str]:
    return [r.status.value for r in chain(cfg, job)]


def decided(fake: FakeCluster, job: str) -> list[dict[str, Any]]:
    """The coordinator's attempts as its chain.json on the main says them."""
    try:
        first = fake.node("node0").run_dirs(job)[0]
        return list(json.loads((first / "coord" / "chain.json").read_text())["attempts"])
    except (OSError, ValueError, KeyError, IndexError):
        return []


def test_two_failures_then_training_with_backoff_between(fake: FakeCluster, cfg: Cfg) -> None:
    job = "xback"
    t0 = time.time()
    # backoffs 1 then 2: the doubling and the wait, proved 3 s sooner than with 2 then 4
    path = start(cfg, job, "--fail-rank 1 --fail-step 2 --how exit3 --fail-attempts 2 --steps 6",
          "restart: {max: 3, backoff: 1, backoff_max: 10}", light=True)  # fmt: skip
    wait_for(lambda: statuses(cfg, job) == ["restarting", "restarting", "finished"], 240,
             interval=1.0, what="three attempts, the last finished")  # fmt: skip
    runs = chain(cfg, job)
    took = time.time() - t0
    assert [r.attempt for r in runs] == [0, 1, 2] and len({r.chain for r in runs}) == 1
    assert "attempt 2" in fake.node("node1").log(job)  # MNTUI_RESTART_COUNT reached the job
    attempts = decided(fake, job)
    delays = []
    for prev, nxt in itertools.pairwise(attempts):
        assert prev["delay"] in (1, 2) and nxt["started_at"] - prev["ended_at"] >= prev["delay"]
        delays.append(nxt["started_at"] - prev["ended_at"])
    assert [e["delay"] for e in attempts[:2]] == [1, 2]  # it doubles
    for prev in runs[:2]:
        assert prev.cause and "node1" in prev.cause, prev.cause
    status = cfg.mntui(path, "status").stdout
    assert "attempt 3/4" in status and "  attempt 1: node1" in status, status
    print(f"\nMEASURED 3 attempts in {took:.1f}s; an attempt's end -> the next one's start "
          f"{', '.join(f'{d:.2f}s' for d in delays)} (backoff 1, 2)")  # fmt: skip


def test_always_failing_gives_up_after_max(fake: FakeCluster, cfg: Cfg) -> None:
    job = "xgiveup"
    path = start(cfg, job, "--fail-rank 1 --fail-step 2 --how exit3",
                 "restart: {max: 2, backoff: 1}", light=True)  # fmt: skip
    wait_for(lambda: statuses(cfg, job)[-1:] == ["gave-up"], 240, interval=1.0, what="gave up")
    runs = chain(cfg, job)
    assert [r.attempt for r in runs] == [0, 1, 2]
    assert "gave up after 2 restart(s) in a row" in cfg.mntui(path, "status").stdout
    wait_for(lambda: not tagged_anywhere(job), 30, what="nothing left running")


def test_not_on_exit_code_is_honoured(fake: FakeCluster, cfg: Cfg) -> None:
    job = "xnoton"
    start(cfg, job, "--fail-rank 1 --fail-step 2 --how exit3",
          "restart: {max: 2, backoff: 1, not_on: [1]}")  # fmt: skip
    wait_for(lambda: statuses(cfg, job)[-1:] in (["torn-down"], ["failed"]), 120,
             interval=1.0, what="the first attempt ended")  # fmt: skip
    wait_for(lambda: not tagged_anywhere(job), 30, what="nothing left running")
    (only,) = decided(fake, job)
    assert only["restart"].endswith("exit code 1 is in restart.not_on"), only
    assert len(chain(cfg, job)) == 1


def test_frozen_worker_is_torn_down_and_the_next_attempt_trains(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "xfrozen"
    start(cfg, job, "", "restart: {max: 1, backoff: 1}", watch=", frozen_after: 1")
    wait_for(lambda: step_count(fake.node("node1").log(job)) >= 2, 60, what="node1 training")
    worker = next(
        p for p in tagged(job, "node1")
        if "faulty_train.py" in cmdline(p) and "torch.distributed" not in cmdline(p)
    )  # fmt: skip
    os.kill(worker, signal.SIGSTOP)
    wait_for(lambda: statuses(cfg, job) == ["restarting", "running"], 120,
             interval=1.0, what="attempt 1 running")  # fmt: skip
    first = chain(cfg, job)[0]
    assert any(h["what"] == "watchdog-teardown" and h["state"] == "frozen" for h in first.history)
    wait_for(lambda: "attempt 1" in fake.node("node1").log(job) and
             step_count(fake.node("node1").log(job)) >= 2, 60, what="attempt 1 training")  # fmt: skip
    assert cfg.mntui(cfg.tmp / "job.yaml", "kill").returncode == 0


def test_a_node_that_fails_twice_is_replaced_by_a_spare(fake: FakeCluster, cfg: Cfg) -> None:
    job = "xspare"
    start(cfg, job, "--fail-if-env BREAK_HERE --fail-step 2 --how exit3 --steps 25",
          "restart: {max: 3, backoff: 1}\nspares: [node2]\n"
          "overrides: {node1: {env: {BREAK_HERE: '1'}}}", light=True)  # fmt: skip
    wait_for(lambda: statuses(cfg, job)[-1:] == ["finished"], 300,
             interval=1.0, what="the chain finished")  # fmt: skip
    runs = chain(cfg, job)
    assert [r.attempt for r in runs] == [0, 1, 2]
    assert [(n.node, n.rank) for n in runs[2].nodes] == [("node0", 0), ("node2", 1)]
    swapped = " ".join(decided(fake, job)[1].get("swapped") or [])
    assert "replaced by spare node2" in swapped, swapped
    assert "rank 1 done after 25 steps" in fake.node("node2").log(job)


def test_a_users_kill_during_the_backoff_ends_the_chain(fake: FakeCluster, cfg: Cfg) -> None:
    job = "xkill"
    args = "--fail-rank 1 --fail-step 2 --how exit3"
    path = start(cfg, job, args, "restart: {max: 3, backoff: 30}", light=True)
    wait_for(lambda: (decided(fake, job) or [{}])[0].get("delay") == 30, 120,
             interval=0.3, what="the backoff")  # fmt: skip
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: not tagged_anywhere(job), 20, what="the chain ended, nothing left")
    # the attempt failed before the kill: it keeps its failure (history counts it); the
    # kill ended the chain in its backoff, so it is no longer `restarting`
    assert statuses(cfg, job) == ["torn-down"], chain(cfg, job)
    assert len(decided(fake, job)) == 1  # no attempt started after the kill
