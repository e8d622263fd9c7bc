"""Local nodes (`host: localhost`) run through the local shell, with no SSH: they must
behave like remote ones whatever terminal mntui itself runs in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fakecluster import alive, pids_with_env, wait_for

from mntui.sessions.launch import tmux

CONFIG = """\
job: tlocal
nodes: [{name: l0, host: localhost}, {name: l1, host: localhost}]
command: echo "up {node}"; exec sleep 300
launch: {ready: log, ready_pattern: "^up ", ready_timeout: 20}
kill: {grace: 2}
"""


def _tmux(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, env=env)


def test_local_nodes_ignore_the_tmux_mntui_runs_in(tmp_path: Path) -> None:
    """Started from a pane of another tmux server (`tmux -L work`), the job's sessions
    must still land on the default server, where every later command looks for them:
    with $TMUX leaking through, both nodes showed `orphaned` and kill left them open."""
    cfg = tmp_path / "local.yaml"
    cfg.write_text(CONFIG)
    plain = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    assert _tmux("-L", "work", "new-session", "-d", "-s", "outer", env=plain).returncode == 0
    try:
        socket = _tmux("-L", "work", "display-message", "-p", "#{socket_path}", env=plain)
        inside = {**plain, "TMUX": f"{socket.stdout.strip()},1,0", "TMUX_PANE": "%0"}

        def mntui(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "mntui.tui.cli", "-c", str(cfg), *args],
                capture_output=True,
                text=True,
                timeout=120,
                env=inside,
                stdin=subprocess.DEVNULL,
            )

        res = mntui("launch", "--no-ui", "--no-watch")
        assert res.returncode == 0, res.stdout + res.stderr
        sessions = [tmux.session_name("tlocal", n) for n in ("l0", "l1")]
        for s in sessions:
            assert _tmux("has-session", "-t", f"={s}", env=plain).returncode == 0, s
        work = _tmux("-L", "work", "list-sessions", "-F", "#{session_name}", env=plain)
        assert work.stdout.split() == ["outer"]

        status = mntui("status", "--json")
        states = [n["state"] for n in __import__("json").loads(status.stdout)["nodes"]]
        assert states == ["running", "running"], status.stdout

        res = mntui("kill")
        assert res.returncode == 0, res.stdout + res.stderr
        for s in sessions:
            assert _tmux("has-session", "-t", f"={s}", env=plain).returncode != 0, s
        wait_for(lambda: not alive(pids_with_env("MNTUI_RUN=tlocal/.*")), 10, what="job gone")
    finally:
        _tmux("-L", "work", "kill-server", env=plain)
        for pid in alive(pids_with_env("MNTUI_RUN=tlocal/.*")):
            os.kill(pid, 9)
