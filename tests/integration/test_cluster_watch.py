"""The watch lives where the job runs (issue 30): sentinels on the nodes and a
coordinator on the main decide, with this machine cut off.

Real parts: sshd fake nodes, tmux, a 2-node torchrun job (gloo, CPU), and the
sentinel bundle shipped over SSH and run on the node's bare `python3 -I -S`. A
"manager cut off from the nodes" is every node's sshd stopped (SIGSTOP of the listener
and its sessions): SSH hangs, the job's own loopback network works, as measured.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clusterwatch import a_rank, cut_off, launched, nothing_left, watchers
from fakecluster import (
    FakeCluster,
    free_port,
    wait_for,
)
from helpers import Cfg, step_count, steps_job, tagged_anywhere, torch_job

from mntui.sessions.runs import latest

pytestmark = pytest.mark.integration

WATCH = "watch: {{where: cluster, port: {port}, unreachable_after: 5, frozen_after: 2}}"


def cluster_job(cfg: Cfg, job: str, extra: str = "", torch: bool = True) -> tuple[Path, int, int]:
    """A 2-node job the cluster watches: real torchrun, or (`torch=False`) a light job
    of plain python3 steps, for what tests the watch rather than the job."""
    port, wport = free_port(), free_port()
    watch = WATCH.format(port=wport) + ("\n    " + extra if extra else "")
    if torch:
        body = torch_job(job, cfg.workdir_with_train(), port, extra=watch)
    else:
        body = steps_job(job, port, extra=watch)
    return cfg.write(body), port, wport


def test_cut_off_manager_a_rank_killed_the_cluster_tears_down_and_status_says_so(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-kill"
    path, port, wport = cluster_job(cfg, job)
    launched(cfg, path, job, fake)
    with cut_off(fake):
        before = step_count(fake.node("node1").log(job))
        wait_for(  # cut off for longer than unreachable_after: nothing is torn down
            lambda: step_count(fake.node("node1").log(job)) >= before + 25,
            60,
            what="the job training on while this machine is cut off",
        )
        assert watchers(job, "coord"), "the coordinator must not decide on our silence"
        rank = a_rank(job, "node1")
        t0 = time.monotonic()
        os.kill(rank, signal.SIGKILL)
        wait_for(
            lambda: not [p for p in tagged_anywhere(job) if p not in watchers(job, "sentinel")],
            30,
            what="the cluster taking the whole job down",
        )
        down = time.monotonic() - t0
    print(f"rank SIGKILL -> job down on both nodes by the cluster alone: {down:.2f}s")
    nothing_left(fake, job, (port, wport))
    res = cfg.mntui(path, "status")
    assert "the coordinator tore the job down" in res.stdout, res.stdout
    assert "node1 failed" in res.stdout, res.stdout
    assert "(torn-down)" in res.stdout, res.stdout


def test_kill_leaves_no_rank_sentinel_coordinator_session_or_port(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-userkill"
    path, port, wport = cluster_job(cfg, job, torch=False)
    launched(cfg, path, job, fake)
    res = cfg.mntui(path, "status", "--json")
    data = json.loads(res.stdout)
    assert data["via"] == "coordinator", data  # one connection, to the main only
    assert data["watch"] == "cluster", data
    assert "2 of 2 sentinel(s) connected" in data["watchdog"], data
    assert [n["state"] for n in data["nodes"]] == ["running", "running"], data
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "asked the coordinator on node0" in res.stdout + res.stderr, res.stdout + res.stderr
    nothing_left(fake, job, (port, wport))
    assert not watchers(job, "sentinel") and not watchers(job, "coord")


def test_a_frozen_rank_while_cut_off_is_torn_down_by_the_cluster(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-frozen"
    path, port, wport = cluster_job(cfg, job, torch=False)
    launched(cfg, path, job, fake)
    with cut_off(fake):
        rank = a_rank(job, "node1")
        os.kill(rank, signal.SIGSTOP)
        t0 = time.monotonic()
        wait_for(
            lambda: not [p for p in tagged_anywhere(job) if p not in watchers(job, "sentinel")],
            30,
            what="the cluster taking the frozen job down",
        )
        down = time.monotonic() - t0
    print(f"rank SIGSTOP -> job down by the cluster alone: {down:.2f}s (frozen_after 2 s)")
    nothing_left(fake, job, (port, wport))
    res = cfg.mntui(path, "status")
    assert "node1 frozen" in res.stdout, res.stdout


def test_a_stranger_on_the_coordinators_port_is_refused_counted_and_harmless(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-stranger"
    path, port, wport = cluster_job(cfg, job, torch=False)
    launched(cfg, path, job, fake)
    for payload in (b"GET / HTTP/1.0\r\n\r\n", b"\xff" * 64, (1 << 31).to_bytes(4, "big")):
        with socket.create_connection(("127.0.0.1", wport), timeout=5) as s:
            s.sendall(payload)
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
    run_dir = fake.node("node0").run_dirs(job)[-1]

    def refused() -> int:
        try:
            status = json.loads((run_dir / "coord" / "status.json").read_text())
        except (OSError, ValueError):
            return 0
        return sum(status.get("refused", {}).values())

    wait_for(lambda: refused() >= 3, 10, what="three refusals counted")
    before = step_count(fake.node("node1").log(job))
    wait_for(lambda: step_count(fake.node("node1").log(job)) > before + 3, 30, what="training")
    assert watchers(job, "coord") and len(watchers(job, "sentinel")) == 2
    assert cfg.mntui(path, "kill").returncode == 0
    nothing_left(fake, job, (port, wport))


def local_sessions() -> list[str]:
    """This machine's tmux sessions (the tests' private server: tests/conftest.py)."""
    res = subprocess.run(
        ["tmux", "-f", "/dev/null", "list-sessions", "-F", "#{session_name}"],
        capture_output=True,
        text=True,
    )
    return res.stdout.split()


def unwatched_then_killed(cfg: Cfg, path: Path, job: str, fake: FakeCluster) -> str:
    """A run nothing watches (no watch runs on this machine: issue 37): it trains,
    `status` (text and JSON) says it is unwatched, nothing of mntui runs here, and `mntui
    kill` ends it. The status text, for the caller."""
    wait_for(
        lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in ("node0", "node1")),
        60,
        what="both nodes training",
    )
    status = cfg.mntui(path, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "unwatched (launched without the cluster's watch)" in status.stdout, status.stdout
    assert "watched by the cluster" not in status.stdout, status.stdout
    data = json.loads(cfg.mntui(path, "status", "--json").stdout)
    assert data["watch"] == "unwatched" and data["watchdog"].startswith("unwatched"), data
    assert not [s for s in local_sessions() if s.startswith("mntui@")], local_sessions()
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    return status.stdout


def test_a_node_without_python3_is_said_in_one_line_and_the_run_is_unwatched(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """Decided before anything starts: no sentinel, no coordinator, and nothing here
    (issue 37; a refusal once the launch probes `setup`'s interpreter). The job's own
    python comes from its `setup` (as a conda env's would); the sentinel would run on
    the login PATH's bare python3."""
    job = "cw-nopython"
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "python3").write_text("#!/bin/sh\nexit 1\n")
    (stub / "python3").chmod(0o755)
    rc = fake.node("node1").home / ".bashrc"
    before = rc.read_text()
    rc.write_text(before + f"\nexport PATH={stub}:$PATH\n")
    setup = f"setup: ['export PATH={Path(sys.executable).parent}:$PATH']"
    try:
        path, port, wport = cluster_job(cfg, job, extra=setup, torch=False)
        doctor = cfg.mntui(path, "doctor", "--json")
        rows = {r["node"]: r for r in json.loads(doctor.stdout) if r["check"] == "sentinel"}
        assert rows["node0"]["status"] == "PASS", rows
        assert rows["node1"]["status"] == "WARN", rows  # the launch goes on, watched here
        assert rows["node1"]["detail"] == (
            "no python3 3.9 or later on the login PATH: the job will be watched from this "
            "machine (keep it on)"
        ), rows
        res = cfg.mntui(path, "launch", "--no-ui", watch=True)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        said = [ln for ln in out.splitlines() if "the cluster cannot watch" in ln]
        assert len(said) == 1, out
        assert said[0].endswith(
            "node1: no python3 3.9 or later: the cluster cannot watch this run; "
            "it is watched from this machine: keep it on"
        ), said
        assert "is unwatched" in res.stdout, out
        assert "watched by the cluster" not in out and "Traceback" not in out, out
        assert not watchers(job, "sentinel") and not watchers(job, "coord")
        rec = latest(job)
        assert rec is not None and rec.watch_port is None and rec.cluster_attempts == []
        unwatched_then_killed(cfg, path, job, fake)
    finally:
        rc.write_text(before)
    nothing_left(fake, job, (port, wport))
    assert not watchers(job, "sentinel") and not watchers(job, "coord")


def test_a_run_with_where_here_is_unwatched_and_says_so(fake: FakeCluster, cfg: Cfg) -> None:
    """`watch.where: here` asked for this machine's watchdog, which is no more: the run
    starts with no watch, and the launch and `status` say it is unwatched."""
    job = "cw-here"
    port = free_port()
    path = cfg.write(steps_job(job, port, extra="watch: {where: here, interval: 0.5}"))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "the cluster cannot watch" not in res.stdout + res.stderr
    assert "is unwatched" in res.stdout, res.stdout
    unwatched_then_killed(cfg, path, job, fake)
    nothing_left(fake, job, (port,))


def test_by_default_the_cluster_watches_and_no_watch_starts_no_watch_at_all(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """`watch.where` unset is `auto`: the cluster's watch where it can run. `--no-watch`
    asks for no watchdog, and the sentinels are one: none starts, nor a coordinator."""
    job = "cw-default"
    port = free_port()
    path = cfg.write(steps_job(job, port, extra="watch: {unreachable_after: 5}"))
    launched(cfg, path, job, fake)
    rec = latest(job)
    assert rec is not None and rec.watch_port == port + 1, rec
    status = json.loads(cfg.mntui(path, "status", "--json").stdout)
    assert status["watch"] == "cluster" and status["via"] == "coordinator", status
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0 and "asked the coordinator on node0" in res.stdout, res.stdout
    nothing_left(fake, job, (port, port + 1))
    res = cfg.mntui(path, "launch", "--no-ui")  # the test harness adds --no-watch
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout + res.stderr
    assert "watched by the cluster" not in out and "cannot watch" not in out, out
    rec = latest(job)
    assert rec is not None and rec.watch_port is None and rec.cluster_attempts == [], rec
    assert not watchers(job, "sentinel") and not watchers(job, "coord")
    assert not [s for s in local_sessions() if s.startswith("mntui@")], local_sessions()
    assert cfg.mntui(path, "kill").returncode == 0
    nothing_left(fake, job, (port,))


def test_auto_watches_from_here_what_only_this_machine_can_and_says_why(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """The config's own words decide it (the rule `where: cluster` refuses by):
    restarts whose workers start on a delay needed this machine's supervisor, which is
    no more: the run starts unwatched, said (until the ports of issue 37 land, when the
    cluster runs these restarts too)."""
    job = "cw-auto-here"
    port = free_port()
    extra = "launch: {ready: delay, ready_delay: 0}\n    restart: {max: 1}"
    path = cfg.write(steps_job(job, port, extra=extra).replace(
        "    launch: {ready_timeout: 20}\n", ""
    ))  # fmt: skip
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    said = [ln for ln in out.splitlines() if "the cluster cannot watch" in ln]
    assert len(said) == 1 and said[0].endswith(
        "launch.ready: restarts start the workers once the main's port listens: the "
        "cluster cannot watch this run; it is watched from this machine: keep it on"
    ), out
    assert "is unwatched" in res.stdout, out
    assert not watchers(job, "sentinel") and not watchers(job, "coord")
    unwatched_then_killed(cfg, path, job, fake)
    nothing_left(fake, job, (port,))
