"""Issue 29 (3, 4): the headless watchdog a launch starts is confirmed up (its lock
held, its first poll done) before the launch says so, or the launch says loudly that
the job runs unwatched; `status` says when nothing guards a live run; and a Ctrl+C at
the moment the watchdog starts ends in one true sentence.

The watchdog runs in the user's own long-lived tmux server (here the test's private
one), whose environment is whatever it was started with: another HOME there once made
the watcher look for the run elsewhere and die, while the launch said it watched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fakecluster import FakeCluster, tagged, wait_for
from helpers import HERE_WATCH, Cfg, free_port, listener_job

from mntui.sessions.launch import watch_session_name
from mntui.sessions.runs import RunRecord, latest


def tmux(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The test's own local tmux server (TMUX_TMPDIR is private: tests/conftest.py)."""
    return subprocess.run(
        ["tmux", "-f", "/dev/null", *args], capture_output=True, text=True, env=env
    )


def long_lived_server(env: dict[str, str]) -> None:
    """The user's tmux server, started long ago with `env`; one session keeps it up."""
    res = tmux("new-session", "-d", "-s", "keep", "sleep 600", env=env)
    assert res.returncode == 0, res.stderr


def pane_of(session: str) -> str:
    """The PID in the session's pane, or "" while there is no such session."""
    return tmux("list-panes", "-t", f"={session}", "-F", "#{pane_pid}").stdout.strip()


def record(job: str) -> RunRecord:
    rec = latest(job)
    assert rec is not None
    return rec


def test_a_server_with_another_home_still_gets_a_watchdog_that_guards(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's report: the CLI with HOME=H and no XDG_STATE_HOME, the tmux server with
    another HOME. The watcher said `no recorded run` and exited; the launch said
    `watchdog running`, and a crash was never torn down."""
    home, other = tmp_path / "home", tmp_path / "other"
    home.mkdir()
    other.mkdir()
    monkeypatch.delenv("XDG_STATE_HOME")  # the state dir is $HOME/.local/state/mntui
    monkeypatch.setenv("HOME", str(home))
    long_lived_server({**os.environ, "HOME": str(other)})
    job = "wshome"
    path = cfg.write(listener_job(job, free_port(), extra="watch: {where: here, interval: 0.5}"))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (home / ".local/state/mntui" / job).is_dir() and not (other / ".local").exists()
    # It guards: a node that dies takes the whole job down.
    for pid in tagged(job, "node1"):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: record(job).status == "torn-down", 60, what="the watchdog's teardown")
    wait_for(lambda: not tagged(job), 30, what="the whole job down")
    assert "watchdog running in local tmux session" in res.stdout, res.stdout
    assert "it has polled the nodes" in res.stdout, res.stdout
    assert not list(record(job).dir.glob("watch.*.env")), "the watcher reads and deletes it"


def test_a_watchdog_that_dies_at_start_fails_the_launch_and_status_says_so(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """A server whose panes die at once (its default-shell a nologin): the watcher never
    runs. The launch says so in one line and exits 1, the job running; `status` says
    nothing guards it."""
    long_lived_server({**os.environ})
    assert tmux("set", "-g", "default-shell", "/usr/sbin/nologin").returncode == 0
    job = "wsdead"
    path = cfg.write(listener_job(job, free_port(), extra=HERE_WATCH))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "watchdog running" not in res.stdout, res.stdout
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    line = res.stderr.strip()
    assert line.startswith(f"mntui: {job} run {record(job).run_id} runs, but UNWATCHED: its "
                           "watchdog did not start: it exited at start (its tmux pane closed "
                           "before it wrote a line; the tmux server runs panes with "
                           "default-shell /usr/sbin/nologin)"), line  # fmt: skip
    assert "`mntui watch -c " in line and "`mntui kill` stops it" in line, line
    assert tagged(job, "node0") and tagged(job, "node1"), "the job must run on"
    assert not list(record(job).dir.glob("watch.*.env")), "its environment, left behind"
    status = cfg.mntui(path, "status")
    assert "watchdog: none guards this run" in status.stdout, status.stdout
    data = json.loads(cfg.mntui(path, "status", "--json").stdout)
    assert data["watchdog"] and data["watchdog"].startswith("watchdog: none"), data
    # `mntui watch`, as the line says, guards it; status then says nothing of the kind.
    watcher = subprocess.Popen(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "watch"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ready = record(job).dir / "watch.ready"
        wait_for(ready.exists, 30, what="mntui watch polling")
        assert "watchdog: none" not in cfg.mntui(path, "status").stdout
    finally:
        watcher.terminate()
        watcher.wait(10)
    assert cfg.mntui(path, "kill").returncode == 0


def test_ctrl_c_as_the_watchdog_starts_says_it_runs_on_guarded(fake: FakeCluster, cfg: Cfg) -> None:
    """SIGINT the moment the watchdog's session appears (it once ended in `internal
    error: LibTmuxException: new-session: duplicate session`, exit 1, 2 tries in 8): exit
    130, one sentence, no traceback, one watchdog, and the job runs on, guarded."""
    job = "wsint"
    path = cfg.write(listener_job(job, free_port(), extra=HERE_WATCH))
    session = watch_session_name(job)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch", "--no-ui"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pane = wait_for(lambda: pane_of(session), 60, interval=0.01, what="its watchdog's session")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "internal error" not in err, err
    assert "watchdog running" not in out, out  # the Ctrl+C came before it was confirmed
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"mntui: interrupted after every node had started: {job} runs on, "
                           "guarded by its watchdog (pid "), err  # fmt: skip
    assert err.count("mntui:") == 1, err
    rec = record(job)
    assert rec.status == "running" and tagged(job, "node0") and tagged(job, "node1")
    sessions = tmux("list-sessions", "-F", "#{session_name}").stdout.split()
    assert sessions.count(session) == 1, sessions
    assert pane_of(session) == pane, "the watchdog that was starting must be the one that guards"
    assert "watchdog: none" not in cfg.mntui(path, "status").stdout
    watching = [ln for ln in (rec.dir / "watch.log").read_text().splitlines()
                if ln.startswith(f"watching {job} run")]  # fmt: skip
    assert len(watching) == 1, watching  # one watchdog, never a second over the first
    assert cfg.mntui(path, "kill").returncode == 0


def test_ctrl_c_before_every_node_runs_says_what_was_stopped(fake: FakeCluster, cfg: Cfg) -> None:
    job = "wsearly"
    path = cfg.write(f"""
    job: {job}
    nodes: [node0, node1]
    command: echo waiting forever; sleep 300
    launch: {{ready_timeout: 60}}
    """)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch", "--no-ui"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: tagged(job, "node0"), 20, what="the main started")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"mntui: interrupted: the launch stopped what it had started (run {record(job).run_id} "
        f"aborted); nothing of {job} runs"
    ), err
    assert not tagged(job)
