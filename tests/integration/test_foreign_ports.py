"""A job's port held by another user's process, and what kill and status say when there
is nothing to do, on real sshd nodes.

The fake nodes log in as root, who sees every process. To stand for what a non-root
node user sees of another user's listener (a socket, no process), the "hidden"
listener below runs as `nobody` and hands its listening socket into a unix socket's
queue, then closes its own descriptor: no fd table holds the socket, so `ss -p` names no
process, while the kernel still gives the socket's owner uid (ss -e, /proc/net/tcp).
Every listener is started here and killed by its PID.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fakecluster import FakeCluster, alive, port_listening, wait_for
from helpers import Cfg, free_port, listener_job

PYTHON = "/usr/bin/python3"  # one that `nobody` may run (the venv's may sit under /root)
LISTENER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
if sys.argv[2] == "hidden":
    keep = socket.socketpair()
    socket.send_fds(keep[0], [b"x"], [s.fileno()])
    s.close()
time.sleep(300)
"""


def _nobody() -> tuple[list[str], int]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not Path(PYTHON).exists():
        pytest.skip("needs root, setpriv and /usr/bin/python3 to run a listener as nobody")
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    prefix = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"]
    return prefix, pw.pw_uid


@contextmanager
def foreign_listener(port: int, how: str) -> Iterator[subprocess.Popen[bytes]]:
    """A listener of user nobody on 127.0.0.1:`port`; `how`: "hidden" or "visible"."""
    prefix, _ = _nobody()
    proc = subprocess.Popen([*prefix, PYTHON, "-c", LISTENER, str(port), how])
    try:
        wait_for(lambda: port_listening(port), 10, what=f"nobody's listener on {port}")
        yield proc
    finally:
        proc.kill()
        proc.wait()


def ss_pids(port: int) -> str:
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True)
    return out.stdout


def both(res: subprocess.CompletedProcess[Any]) -> str:
    return str(res.stdout) + str(res.stderr)


def test_doctor_names_the_user_of_a_hidden_port_holder(fake: FakeCluster, cfg: Cfg) -> None:
    """It said `held by a process of another user: ?`; the socket's uid is known."""
    _, uid = _nobody()
    port = free_port()
    path = cfg.write(f"""
    job: fdoctor
    nodes: [node0, node1]
    master_port: {port}
    command: sleep 1
    """)
    with foreign_listener(port, "hidden"):
        assert "pid=" not in ss_pids(port), "the listener's process is not hidden"
        res = cfg.mntui(path, "doctor", timeout=120)
        assert res.returncode == 2, both(res)
        row = next(line for line in res.stdout.splitlines() if re.search(r"\bports\s+FAIL", line))
        assert f"port {port} held by uid {uid} (nobody)" in row, res.stdout
        assert "?" not in row and "-> mntui cleanup" in res.stdout


def test_cleanup_leaves_another_users_ports_alone_and_fails(fake: FakeCluster, cfg: Cfg) -> None:
    """`cleanup --yes` exited 0 with the port still held and said nothing; a visible
    holder of another user was "still busy". Both are named, left alone, exit 1. `kill`
    names the hidden holder's user too."""
    _, uid = _nobody()
    port, other = free_port(), free_port()
    path = cfg.write(f"""
    job: fcleanup
    nodes: [node0, node1]
    master_port: {port}
    command: sleep 1
    """)
    with foreign_listener(port, "hidden") as hidden:
        res = cfg.mntui(path, "cleanup", "--yes")
        assert res.returncode == 1, both(res)
        for node in ("node0", "node1"):
            assert (
                f"{node}: not yours, left alone: port {port} held by uid {uid} (nobody)"
                in res.stdout
            ), both(res)
        res = cfg.mntui(path, "kill")
        assert res.returncode == 1 and f"port {port} held by uid {uid} (nobody)" in res.stdout
        two = cfg.write(f"""
        job: fcleanup
        nodes: [node0]
        master_port: {port}
        ports: [{other}]
        command: sleep 1
        """)
        with foreign_listener(other, "visible") as visible:
            res = cfg.mntui(two, "cleanup", "--yes")
            assert res.returncode == 1, both(res)
            assert f"node0: not yours, left alone: port {port} held by uid {uid}" in res.stdout
            assert (
                f"node0: not yours, left alone: port {other} held by pid {visible.pid} (nobody)"
                in res.stdout
            ), both(res)
            assert "still busy" not in res.stdout
            assert alive([visible.pid, hidden.pid]) == [visible.pid, hidden.pid]
            assert port_listening(port) and port_listening(other)


def test_a_second_kill_says_once_that_nothing_runs(fake: FakeCluster, cfg: Cfg) -> None:
    """It printed `killed  nothing to kill` per node, and no kill said what the port
    check found."""
    port = free_port()
    path = cfg.write(listener_job("fagain", port))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    first = cfg.mntui(path, "kill")
    assert first.returncode == 0, both(first)
    killed = [line for line in first.stdout.splitlines() if re.search(r"\]\s+killed\s", line)]
    assert len(killed) == 2 and all(f"port {port} free" in line for line in killed), first.stdout
    again = cfg.mntui(path, "kill")
    assert again.returncode == 0, both(again)
    lines = again.stdout.splitlines()
    assert not [line for line in lines if re.search(r"\s(killed|failed)\s", line)], again.stdout
    said = f"nothing to kill: nothing of fagain runs on node0, node1; port {port} free on each"
    assert [line for line in lines if "nothing" in line] == [line for line in lines if said in line]
    assert len([line for line in lines if said in line]) == 1, again.stdout


def test_status_without_a_recorded_run_is_nothing_running(fake: FakeCluster, cfg: Cfg) -> None:
    """docs/cli.md: exit 3 is nothing running; with no recorded run `status` exited 2."""
    path = cfg.write(listener_job("fnorun", free_port()))
    res = cfg.mntui(path, "status")
    assert res.returncode == 3, both(res)
    assert "nothing of job 'fnorun' is running" in res.stdout and not res.stderr
    res = cfg.mntui(path, "status", "--json")
    assert res.returncode == 3 and res.stdout == "", both(res)
    res = cfg.mntui(path, "status", "--run", "20990101-000000-abcd")  # a run named: usage
    assert res.returncode == 2 and "no recorded run" in res.stderr, both(res)
