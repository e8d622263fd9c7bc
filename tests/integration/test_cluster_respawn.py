"""The main's sentinel and the coordinator keep each other up (issue 30, design §2 and
§5; node/proc/respawn.py): either one SIGKILLed (found by its own pid file, never by name)
is started again on the main before the others call it lost, the job trains on past
unreachable_after, the journal says so, and the watch still works: a rank killed
afterwards is torn down, a restart is started once, and the user's kill leaves nothing.

Real parts, as tests/integration/test_cluster_faults.py: sshd fake nodes, tmux, the
light 2-node steps job (the watch is under test), the bundle shipped over SSH.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from clusterwatch import NODES, a_rank, launched, nothing_left, run_dir, watchers
from fakecluster import FakeCluster, alive, free_port, pids_with_env, tagged, wait_for
from helpers import Cfg, step_count, steps_job
from test_cluster_faults import decision, lost, read_json, told_on_failure

pytestmark = pytest.mark.integration

UNREACHABLE_AFTER = 4
WATCH = "watch: {{where: cluster, port: {port}, unreachable_after: 4, frozen_after: 2}}"


def job_config(cfg: Cfg, job: str, extra: str = "") -> tuple[Path, int, int]:
    port, wport = free_port(), free_port()
    watch = WATCH.format(port=wport) + ("\n    " + extra if extra else "")
    return cfg.write(steps_job(job, port, extra=watch)), port, wport


def first_dir(fake: FakeCluster, job: str, node: str = "node0") -> Path:
    """The chain's first run dir on `node`: the watch's files live there, whichever
    attempt runs."""
    return fake.node(node).run_dirs(job)[0]


def pid_of(fake: FakeCluster, job: str, role: str, node: str = "node0") -> int | None:
    """A node's coordinator, sentinel or guard by its pid file, if that pid is the live
    process with the role's own tag (a reused pid is not it)."""
    try:
        pid = int((first_dir(fake, job, node) / f"{role}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    mine = alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{node}/{role}"))
    return pid if pid in mine else None


def journal(fake: FakeCluster, job: str, kind: str) -> list[dict[str, Any]]:
    path = first_dir(fake, job) / "coord" / "journal.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and e.get("kind") == kind:
            out.append(e)
    return out


def steps(fake: FakeCluster, job: str) -> dict[str, int]:
    return {n: step_count(fake.node(n).log(job)) for n in NODES}


def killed_and_back(
    fake: FakeCluster, job: str, role: str, node: str = "node0"
) -> tuple[int, float]:
    """SIGKILL a node's `role` by its pid file; its successor's pid and the seconds
    from the kill to its pid file naming it."""
    old = pid_of(fake, job, role, node)
    assert old is not None, f"no live {role} of {job} named by its pid file"
    t0 = time.monotonic()
    os.kill(old, signal.SIGKILL)
    new = wait_for(
        lambda: (p := pid_of(fake, job, role, node)) is not None and p != old and p,
        15,
        what=f"the {role} started again",
    )
    assert isinstance(new, int)
    return new, time.monotonic() - t0


def trains_on(fake: FakeCluster, job: str, since: float, before: dict[str, int]) -> None:
    """Past 2 x unreachable_after from the fault: both nodes stepping, nothing decided,
    nothing lost."""
    left = since + 2 * UNREACHABLE_AFTER - time.monotonic()
    wait_for(lambda: time.monotonic() >= since + 2 * UNREACHABLE_AFTER, left + 5,
             what="twice unreachable_after")  # fmt: skip
    after = steps(fake, job)
    print(f"steps across the respawn: {before} -> {after}")
    for n in NODES:
        assert after[n] >= before[n] + 20, f"{n} did not train on: {before} -> {after}"
        assert tagged(job, n), f"{n}'s ranks are gone"
        assert lost(fake, job, n) is None, f"{n} called its coordinator lost"
    assert decision(fake, job) is None, f"a decision without a fault: {decision(fake, job)}"


def test_the_coordinator_killed_is_started_again_and_the_job_trains_on(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cr-coord"
    path, port, wport = job_config(cfg, job)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        before = steps(fake, job)
        t0 = time.monotonic()
        new, took = killed_and_back(fake, job, "coord")
        print(f"coordinator SIGKILL -> a new one (pid {new}) in {took:.2f}s")
        trains_on(fake, job, t0, before)
        status = read_json(run_dir(fake, job, "node0") / "coord" / "status.json") or {}
        assert status.get("pid") == new, f"the board is not the new coordinator's: {status}"
        assert all(status["nodes"][n]["connected"] for n in NODES), status
        res = cfg.mntui(path, "status", "--json")
        data = json.loads(res.stdout)
        assert data.get("via") == "coordinator", data
        said = journal(fake, job, "respawn")
        assert [e["data"]["who"] for e in said] == ["coordinator"], said
        assert said[0]["data"]["pid"] == new, said
        assert journal(fake, job, "resumed"), "the new coordinator did not say it resumed"
        res = cfg.mntui(path, "kill")
        assert res.returncode == 0, res.stdout + res.stderr
        nothing_left(fake, job, (port, wport))


def test_the_mains_sentinel_killed_is_started_again_and_still_tears_down(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cr-sentinel"
    path, port, wport = job_config(cfg, job)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        before = steps(fake, job)
        t0 = time.monotonic()
        new, took = killed_and_back(fake, job, "sentinel")
        print(f"main sentinel SIGKILL -> a new one (pid {new}) in {took:.2f}s")
        trains_on(fake, job, t0, before)
        said = journal(fake, job, "respawn")
        assert [e["data"]["who"] for e in said] == ["sentinel"], said
        assert len(watchers(job, "sentinel", "node0")) == 1
        t1 = time.monotonic()
        os.kill(a_rank(job, "node0"), signal.SIGKILL)  # still watched: torn down
        d = wait_for(lambda: decision(fake, job), 30, what="the coordinator's decision")
        wait_for(lambda: not tagged(job), 20, what="the job down on both nodes")
        print(f"a main's rank SIGKILL after the respawn -> job down {time.monotonic() - t1:.2f}s")
        assert isinstance(d, dict) and (d["decided_by"], d["node"]) == ("coordinator", "node0"), d
        assert d["state"] in ("failed", "orphaned"), d
        assert "error" not in d["kill"]["node0"] and "by" not in d["kill"]["node0"], (
            f"the new sentinel did not kill the main's part itself: {d['kill']}"
        )
        wait_for(lambda: not watchers(job, "sentinel") and not watchers(job, "coord"), 20,
                 what="the watch exiting after the chain ended")  # fmt: skip
        assert cfg.mntui(path, "kill").returncode == 0
        nothing_left(fake, job, (port, wport))


def test_a_workers_sentinel_and_its_guard_keep_each_other_up(fake: FakeCluster, cfg: Cfg) -> None:
    """A worker's sentinel killed alone is started again by its guard (node/sentinel/guard.py)
    before the coordinator calls the node unreachable: the job trains on, the journal
    says so once, and `status` shows it; its guard killed is started again by the
    sentinel; the user's kill then takes both with the job."""
    job = "cr-guard"
    path, port, wport = job_config(cfg, job)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        assert len(watchers(job, "guard", "node1")) == 1 and not watchers(job, "guard", "node0")
        assert cfg.mntui(path, "status").returncode == 0  # this machine looks once
        before = steps(fake, job)
        t0 = time.monotonic()
        new, took = killed_and_back(fake, job, "sentinel", "node1")
        print(f"worker sentinel SIGKILL -> a new one (pid {new}) in {took:.2f}s")
        trains_on(fake, job, t0, before)
        said = journal(fake, job, "respawn")
        assert [(e["node"], e["data"]["who"], e["data"]["pid"]) for e in said] == [
            ("node1", "sentinel", new)
        ], said
        res = cfg.mntui(path, "status")
        assert "node1's sentinel died and was started again" in res.stdout, res
        guard, took = killed_and_back(fake, job, "guard", "node1")
        print(f"worker guard SIGKILL -> a new one (pid {guard}) in {took:.2f}s")
        assert len(watchers(job, "guard", "node1")) == 1
        res = cfg.mntui(path, "kill")
        assert res.returncode == 0, res.stdout + res.stderr
        nothing_left(fake, job, (port, wport))


def test_a_coordinator_killed_in_a_restarts_backoff_starts_the_next_attempt_once(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """The chain goes on from its files: the failure decided once, the backoff waited
    out, attempt 1 started once on each node; the user's kill then leaves nothing."""
    job = "cr-backoff"
    path, port, wport = job_config(cfg, job, "restart: {max: 2, backoff: 4}")
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        chain = first_dir(fake, job) / "coord" / "chain.json"
        os.kill(a_rank(job, "node1"), signal.SIGKILL)
        wait_for(lambda: (read_json(chain) or {}).get("status") == "backoff", 30,
                 what="the chain in its backoff")  # fmt: skip
        new, took = killed_and_back(fake, job, "coord")
        print(f"coordinator SIGKILL in the backoff -> a new one (pid {new}) in {took:.2f}s")
        c = wait_for(
            lambda: (
                (d := read_json(chain)) is not None
                and d.get("status") == "running"
                and len(d["attempts"]) == 2
                and d
            ),
            40,
            what="attempt 1 running",
        )
        assert isinstance(c, dict)
        assert [a["attempt"] for a in c["attempts"]] == [0, 1], c
        assert c["attempts"][0]["end"]["culprit"] == "node1", c
        wait_for(lambda: all(step_count(fake.node(n).log(job)) >= 3 for n in NODES), 30,
                 what="attempt 1 training")  # fmt: skip
        for n in NODES:  # started once by its sentinel, whoever asked
            log = (first_dir(fake, job, n) / "sentinel.log").read_text()
            assert log.count("attempt 1 started") == 1, log
        assert len(journal(fake, job, "decision")) == 1, journal(fake, job, "decision")
        res = cfg.mntui(path, "kill")
        assert res.returncode == 0, res.stdout + res.stderr
        nothing_left(fake, job, (port, wport))
