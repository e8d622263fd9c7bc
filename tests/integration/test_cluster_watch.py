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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from clusterwatch import NODES, a_rank, cut_off, launched, nothing_left, run_dir, watchers
from fakecluster import (
    FakeCluster,
    cmdline,
    free_port,
    wait_for,
)
from helpers import Cfg, step_count, steps_job, tagged_anywhere, torch_job

from mntui.sessions.launch.tmux import session_name
from mntui.sessions.runs import latest
from mntui.sessions.watch import clusterfeed
from mntui.sessions.watch.clusterfeed import FeedStream

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
    assert "node1 rank 1 failed" in res.stdout and "SIGKILL" in res.stdout, res.stdout
    assert "(torn-down)" in res.stdout, res.stdout


def test_kill_leaves_no_rank_sentinel_coordinator_session_or_port(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-userkill"
    path, port, wport = cluster_job(cfg, job, torch=False)
    launched(cfg, path, job, fake)

    def judged() -> dict[str, Any] | None:
        """The board once the coordinator judged both nodes: a sentinel that connected
        last may not be judged yet in the board of the second it connected (seen once,
        'starting', on a loaded machine)."""
        data: dict[str, Any] = json.loads(cfg.mntui(path, "status", "--json").stdout)
        return data if all(n["state"] != "starting" for n in data["nodes"]) else None

    data = wait_for(judged, 20, interval=0.2, what="both nodes judged on the board")
    assert isinstance(data, dict)
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


@contextmanager
def no_python3(fake: FakeCluster, tmp_path: Path, nodes: tuple[str, ...]) -> Iterator[None]:
    """`nodes` whose login PATH's python3 and python are stubs that fail (a node without
    a python, or with one too old to run a sentinel), through their .bashrc; restored
    after."""
    stub = tmp_path / "stub"
    stub.mkdir(exist_ok=True)
    for name in ("python3", "python"):
        (stub / name).write_text("#!/bin/sh\nexit 1\n")
        (stub / name).chmod(0o755)
    rcs = {n: fake.node(n).home / ".bashrc" for n in nodes}
    before = {n: rc.read_text() for n, rc in rcs.items()}
    try:
        for n, rc in rcs.items():
            rc.write_text(before[n] + f"\nexport PATH={stub}:$PATH\n")
        yield
    finally:
        for n, rc in rcs.items():
            rc.write_text(before[n])


def interpreter(pid: int) -> str:
    return cmdline(pid).split(" ", 1)[0]


def test_nodes_without_python3_run_the_watch_on_the_one_their_setup_provides(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """Both nodes' bare python3 cannot run a sentinel; the job's `setup` puts a venv's
    first on the PATH (as a conda env's would): the watchers run on it, by its path,
    and the respawns start them again on it (the coordinator by the main's sentinel, a
    worker's sentinel by its guard)."""
    job = "cw-setuppy"
    venv = Path(sys.executable).parent
    python = str(venv / "python3")
    with no_python3(fake, tmp_path, NODES):
        path, port, wport = cluster_job(
            cfg, job, extra=f"setup: ['export PATH={venv}:$PATH']", torch=False
        )
        doctor = cfg.mntui(path, "doctor", "--json")
        rows = {r["node"]: r for r in json.loads(doctor.stdout) if r["check"] == "sentinel"}
        for n in NODES:
            assert rows[n]["status"] == "PASS", rows
            assert rows[n]["detail"] == (
                f"no python3 on the login PATH; {python} (after `setup`) runs the cluster's watch"
            ), rows
        res = cfg.mntui(path, "launch", "--no-ui", watch=True)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        said = [ln for ln in out.splitlines() if "the cluster's watch runs on" in ln]
        assert len(said) == 2 and all(ln.endswith(f"runs on {python} (after `setup`)")
                                      for ln in said), out  # fmt: skip
        assert "watched by the cluster: 2 of 2 sentinel(s)" in out and "Traceback" not in out
        every = [*watchers(job, "coord"), *watchers(job, "sentinel"), *watchers(job, "guard")]
        assert len(every) == 4 and {interpreter(p) for p in every} == {python}, every
        assert (run_dir(fake, job, "node0") / "python").read_text() == f"{python}\n"
        rec = latest(job)  # the app's stream runs on the main's interpreter too
        assert rec is not None
        feed = FeedStream(["ssh", "-F", str(fake.ssh_config)], "node0",
                          clusterfeed.script(rec, clusterfeed.bundle_sha()), silence=30.0)  # fmt: skip
        try:  # the node's .bashrc says hello first, in its words
            said = [line for _, line in zip(range(5), feed.lines(), strict=False)]
        finally:
            feed.close()
        assert [x for x in said if x.startswith(b"MNTUIFEED1 ")], said  # the follower's
        wait_for(
            lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in NODES),
            60,
            what="both nodes training",
        )
        for role, node in (("coord", "node0"), ("sentinel", "node1")):
            (old,) = watchers(job, role, node)
            os.kill(old, signal.SIGKILL)
            new = wait_for(
                lambda role=role, node=node, old=old: [
                    p for p in watchers(job, role, node) if p != old
                ],
                30,
                what=f"{node}'s {role} started again",
            )
            assert isinstance(new, list) and [interpreter(p) for p in new] == [python], new
        data = json.loads(cfg.mntui(path, "status", "--json").stdout)
        assert data["watch"] == "cluster" and data["via"] == "coordinator", data
        res = cfg.mntui(path, "kill")
        assert res.returncode == 0, res.stdout + res.stderr
    nothing_left(fake, job, (port, wport))
    assert not watchers(job, "sentinel") and not watchers(job, "coord")


def test_a_node_no_interpreter_fits_refuses_the_launch_in_one_line_exit_2(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """node1's bare python3 cannot run a sentinel and its `setup` provides none (the job
    names its python by its path): the launch refuses before anything starts, in one
    line naming the node and the fix, exit 2; `--no-watch` still starts the job,
    unwatched, and `status` says so."""
    job = "cw-nopython"
    port, wport = free_port(), free_port()
    body = steps_job(job, port, extra=WATCH.format(port=wport))
    path = cfg.write(body.replace("exec python3 -c", f"exec {sys.executable} -c"))
    with no_python3(fake, tmp_path, ("node1",)):
        doctor = cfg.mntui(path, "doctor", "--json")
        rows = {r["node"]: r for r in json.loads(doctor.stdout) if r["check"] == "sentinel"}
        assert rows["node0"]["status"] == "PASS" and rows["node1"]["status"] == "FAIL", rows
        res = cfg.mntui(path, "launch", "--no-ui", watch=True)
        assert res.returncode == 2, res.stdout + res.stderr
        (line,) = res.stderr.splitlines()
        assert line == (
            "mntui: launch refused: node1: no python3 on the login PATH and none 3.9 or later "
            "after `setup`: the cluster's watch cannot run there; nothing was started (install "
            "python3 3.9 or later on the node, or let its `setup` provide one; `mntui launch "
            "--no-watch` runs the job unwatched)"
        ), res.stderr
        assert "tmux session" not in res.stdout, res.stdout  # nothing started
        assert latest(job) is None and not tagged_anywhere(job)
        assert not [s for n in NODES if (s := session_name(job, n)) in fake.node(n).sessions()]
        res = cfg.mntui(path, "launch", "--no-ui")  # the test harness adds --no-watch
        assert res.returncode == 0, res.stdout + res.stderr
        assert not watchers(job, "sentinel") and not watchers(job, "coord")
        unwatched_then_killed(cfg, path, job, fake)
    nothing_left(fake, job, (port,))


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
    assert rec is not None and rec.watch_port is None, rec
    assert not watchers(job, "sentinel") and not watchers(job, "coord")
    assert not [s for s in local_sessions() if s.startswith("mntui@")], local_sessions()
    assert cfg.mntui(path, "kill").returncode == 0
    nothing_left(fake, job, (port,))
