"""node/proc/daemon.py for real: a bare `python3 -I -S` child daemonizes, and what its caller
(here as on a node: a shell's command substitution) sees is the truth in one line. The
daemon is out of the caller's session and tree, holds none of its descriptors, and is
killed by the PID it wrote."""

from __future__ import annotations

import os
import select
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import alive, proc_state, wait_for

from mntui.sessions.launch import sentinelship
from mntui.sessions.node.proc.daemon import clean_env

SYSTEM_PYTHON = "/usr/bin/python3"

# argv: the bundle, mode, run dir, max_log, timeout. The module comes from the bundle,
# under a python with nothing of ours on its path, as on a node.
CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from mntui.sessions.node.proc import daemon
mode, d = sys.argv[2], sys.argv[3]
ready = daemon.daemonize(d + "/sentinel.log", d + "/sentinel.pid",
                         max_log=int(sys.argv[4]), timeout=float(sys.argv[5]))
print("hello from the daemon")
if mode == "raise":
    raise RuntimeError("port 1 is taken")
if mode == "fail":
    ready.fail("no watch.json\\nsecond line")
    sys.exit(1)
if mode == "exit":
    sys.exit(3)
if mode == "up":
    ready("up\\x1b[2J on 7")
while True:
    time.sleep(3600)
"""


def start(
    run_dir: Path, mode: str, max_log: int = 1 << 20, timeout: float = 20, **kw: object
) -> subprocess.CompletedProcess[str]:
    pyz = run_dir.parent / "bundle.pyz"
    if not pyz.exists():
        pyz.write_bytes(sentinelship.bundle().data)
    argv = [SYSTEM_PYTHON, "-I", "-S", "-c", CHILD, str(pyz), mode, str(run_dir)]
    return subprocess.run(
        [*argv, str(max_log), str(timeout)],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        **kw,  # type: ignore[arg-type]
    )


def kill_by_pid_file(run_dir: Path) -> None:
    try:
        pid = int((run_dir / "sentinel.pid").read_text())
    except (OSError, ValueError):
        return
    if proc_state(pid) is not None and b"bundle.pyz" in _cmdline(pid):
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not alive([pid]), 10, what=f"daemon {pid} gone")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "run dir"
    d.mkdir()
    yield d
    kill_by_pid_file(d)


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def test_the_daemon_leaves_its_callers_session_and_tree(run_dir: Path) -> None:
    log = run_dir / "sentinel.log"
    log.write_text("x" * 200)
    r, w = os.pipe()  # stands for a pipe the node's shell passed down (sshd's channel)
    os.set_inheritable(w, True)
    try:
        res = start(run_dir, "up", max_log=100, pass_fds=(w,))
        os.close(w)
        assert res.returncode == 0 and res.stderr == "", res
        word, pid_text, message = res.stdout.split(" ", 2)
        pid = int(pid_text)
        assert (word, message) == ("SENTINEL", "up on 7\n"), res.stdout  # one line, no escape
        # Every writer of the pipe is gone, the daemon too: a shell's $(...) would return.
        assert select.select([r], [], [], 10)[0] and os.read(r, 1) == b""
    finally:
        os.close(r)
    assert (run_dir / "sentinel.pid").read_text() == f"{pid}\n"
    assert (run_dir / "sentinel.pid").stat().st_mode & 0o777 == 0o600
    _state, ppid, _pgrp, sid = _stat(pid)[:4]
    assert int(sid) != os.getsid(0) and int(sid) != pid  # its own session, and no leader
    assert int(ppid) not in (os.getpid(), int(sid))  # init or a subreaper took it
    assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
    assert os.readlink(f"/proc/{pid}/fd/1") == os.readlink(f"/proc/{pid}/fd/2") == str(log)
    assert os.readlink(f"/proc/{pid}/cwd") == str(run_dir)
    assert "Umask:\t0077" in Path(f"/proc/{pid}/status").read_text()
    assert (run_dir / "sentinel.log.1").read_text() == "x" * 200  # rotated once, at start
    wait_for(lambda: "hello from the daemon" in log.read_text(), 10, what="the daemon's log")
    assert log.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("raise", "sentinel: RuntimeError: port 1 is taken\n"),
        ("fail", "sentinel: no watch.json second line\n"),
        ("exit", "sentinel: exited before it was ready: see {log}\n"),
        ("silent", "sentinel: not ready within 1s: see {log}\n"),
    ],
)
def test_a_start_that_fails_says_why_in_one_line(run_dir: Path, mode: str, said: str) -> None:
    res = start(run_dir, mode, timeout=1)
    assert res.returncode == 1 and res.stdout == "", res
    assert res.stderr == said.format(log=run_dir / "sentinel.log"), res.stderr
    if mode == "raise":  # the whole traceback is in the log
        log = run_dir / "sentinel.log"
        wait_for(lambda: "Traceback" in log.read_text(), 10, what="the traceback in the log")


def test_a_run_dir_that_is_not_there_fails_before_anything_starts(tmp_path: Path) -> None:
    res = start(tmp_path / "missing", "up")
    assert res.returncode == 1 and res.stdout == "", res
    assert res.stderr.startswith("sentinel: cannot start: [Errno 2]"), res.stderr
    assert len(res.stderr.splitlines()) == 1


def test_what_the_sentinel_spawns_carries_no_tag_and_no_tmux() -> None:
    env = {
        "MNTUI_RUN": "j/r/n/sentinel",
        "MNTUI_X": "1",
        "TMUX": "/tmp/t,1,0",
        "TMUX_PANE": "%1",
        "TMUX_TMPDIR": "/tmp/t",
        "PATH": "/bin",
        "XMNTUI_RUN": "kept",
    }
    assert clean_env(env) == {"TMUX_TMPDIR": "/tmp/t", "PATH": "/bin", "XMNTUI_RUN": "kept"}
