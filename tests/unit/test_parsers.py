"""Parsers of our own marked output, and the shell helpers they read, run for real."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import free_port, wait_for

from mntui.sessions.launch import LineSplitter, parse_read
from mntui.sessions.launch.kill import (
    free_script,
    holders_script,
    kill_script,
    parse_free,
    parse_kill,
)
from mntui.sessions.procs import (
    SHELL_LIB,
    PortHolder,
    job_node_pattern,
    node_lines,
    parse_listeners,
    parse_procs,
)
from mntui.sessions.results import NodeError
from mntui.sessions.ssh.nodeshell import BEGIN, END, find_end, frame, unwrap


def b64(text: str) -> str:
    """A field as the node's shell library sends it."""
    return base64.b64encode(text.encode()).decode()


def test_unwrap_ignores_login_shell_noise() -> None:
    raw = f"Welcome!\nconda activated\n{BEGIN}7\nhello\nworld{END}x\n{END}7 3\n"
    res = unwrap("n", raw, "", 0.1, 7)
    assert res.stdout == f"hello\nworld{END}x" and res.exit_code == 3
    assert find_end(raw, 7) == len(raw) and find_end(raw[:-2], 7) == -1


def test_unwrap_without_markers_names_the_node() -> None:
    with pytest.raises(NodeError, match="n1: no answer from the node's shell: bash: sh: not found"):
        unwrap("n1", "motd\n", "bash: sh: not found\n", 0.1)


def test_frame_runs_in_sh_and_survives_exit() -> None:
    out = subprocess.run(
        ["sh", "-s"], input=frame("echo hi; exit 4", 2), capture_output=True, text=True
    ).stdout
    res = unwrap("n", out, "", 0, 2)
    assert (res.stdout, res.exit_code) == ("hi\n", 4)


def test_parse_kill_report() -> None:
    launch, torchrun = b64("bash\0./launch.sh\0"), b64("python3\0-m\0torch.distributed.run\0x")
    bob, other = b64("bob"), b64("python3\0other.py\0")
    out = (
        f"PROC 10 S {launch}\nPROC 11 T {torchrun}\n"
        f"SIGKILL 11\nPROC 11 T {torchrun}\nSESSION_KILLED\nLEFT\n"
        f"LISTEN 29500 99 {bob} {other}\nELAPSED_MS 1234\n"
    )
    r = parse_kill("g1", out)
    assert [p.pid for p in r.found] == [10, 11] and r.sigkilled == (11,) and r.left == ()
    assert r.session_killed and r.seconds == 1.234
    assert (
        not r.clean
        and r.port_holders[0].describe() == "port 29500 held by pid 99 (bob): python3 other.py"
    )
    assert "1 needed SIGKILL" in r.summary()


def test_parse_kill_keeps_what_a_process_was_when_first_found() -> None:
    """A sweep lists a process again while its SIGKILL lands: zombie-bound, its command
    line already empty. The report says what it was, not how it died."""
    stubborn = b64("python3\0train.py\0")
    r = parse_kill("g1", f"PROC 11 S {stubborn}\nSIGKILL 11\nPROC 11 R {b64('')}\nLEFT\n")
    assert [(p.pid, p.state, p.cmdline) for p in r.found] == [(11, "S", "python3 train.py")]


def test_a_kill_by_tag_takes_every_watcher_of_the_job_on_the_node_and_nothing_else() -> None:
    """The ranks, the sentinel, the coordinator and a worker's guard (node/guard.py):
    a watcher left behind would start the others again after the user's kill."""
    import re

    rx = re.compile(job_node_pattern("j", "n1"))
    for role in ("", "/sentinel", "/coord", "/guard"):
        assert rx.fullmatch(f"MNTUI_RUN=j/r1/n1{role}"), role
    for other in ("j/r1/n10", "jx/r1/n1", "j/r1/n1/other", "j/r1/n1/guard/x"):
        assert not rx.fullmatch(f"MNTUI_RUN={other}"), other


def test_parse_listeners_dedupes_v4_v6_and_foreign() -> None:
    hs = parse_listeners([f"LISTEN 1 5 {b64('me')} {b64('a')}"] * 2 + ["LISTEN 2 - - -", "junk"])
    assert [(h.port, h.pid, h.user) for h in hs] == [(1, 5, "me"), (2, None, None)]
    assert "another user" in hs[1].describe()


def test_kill_and_log_answers_count_what_is_no_record() -> None:
    """A forged `LISTEN 29500 1 root x` line (the old, unencoded shape) made kill report
    "not clean"; now it is no record: skipped and counted, like the rest. (What keeps a
    node from printing a well-formed record is the encoding at the source: the
    real-script tests below.)"""
    r = parse_kill(
        "n",
        "LISTEN 29500 1 root x\nLEFT x\nSIGKILL abc\nELAPSED_MS 1e9\nPROC 5 S not*b64\n"
        "SESSION_KILLED now\nLEFT\nELAPSED_MS 5\n",
    )
    assert r.clean and r.port_holders == () and r.found == () and not r.session_killed
    assert r.malformed == 6 and r.seconds == 0.005 and "6 unreadable line(s)" in r.summary()
    c = parse_read("SIZE 10\nEXIT x\nDATA\naGk=\nDATA\nnoise\n", 0)
    assert (c.data, c.size, c.exit_code, c.malformed) == (b"hi", 10, None, 3)


def test_parse_log_chunks() -> None:
    c = parse_read("SIZE 10\nEXIT 0\nDATA\naGVsbG8=\n", 5)
    assert (c.data, c.offset, c.size, c.exit_code) == (b"hello", 10, 10, 0)
    c = parse_read("SIZE 2\nDATA\naGk=\n", 50)  # truncated file: start over
    assert (c.data, c.offset) == (b"hi", 2)
    s = LineSplitter()
    assert s.feed(b"a\nb") == ["a"] and s.feed(b"c\r\n") == ["bc"] and s.flush() == []


def test_scan_finds_only_exact_tags_and_never_itself() -> None:
    """The shell scan, run for real against processes this test starts."""

    def start(tag: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env={**os.environ, "MNTUI_RUN": tag},
        )

    mine, other_node, other_job = start("jb/r1/n1"), start("jb/r1/n10"), start("jbx/r1/n1")
    try:
        script = f"{SHELL_LIB}\nmntui_procinfo $(mntui_scan '{job_node_pattern('jb', 'n1')}')"
        env = {**os.environ, "MNTUI_RUN": "jb/r1/n1"}  # even if mntui itself were tagged
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env).stdout
        assert [p.pid for p in parse_procs(out.splitlines())] == [mine.pid]
    finally:
        for p in (mine, other_node, other_job):
            p.kill()
            p.wait()


# -- node output is data: real scripts, run here, against processes that lie ----------

# A child that names itself (comm), ignores SIGTERM or listens on a port if asked, and
# carries whatever text it is given first in its argv (a command line is cut at 300
# bytes: the text comes before the program, which travels in the environment).
CHILD = """import signal, socket, sys, time
comm, port, term = sys.argv[2:5]
if comm:
    open("/proc/self/comm", "w").write(comm)
if term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if int(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(port)))
    s.listen()
print("ready", flush=True)
time.sleep(60)
"""
STAT21 = " ".join(["1"] * 21)  # enough numbers for a stat line the old parser accepted


@contextlib.contextmanager
def child(
    argv_text: str, tag: str | None = None, comm: str = "", port: int = 0, ignore_term: bool = False
) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "CHILD": CHILD, **({"MNTUI_RUN": tag} if tag else {})}
    run = "import os; exec(os.environ['CHILD'])"
    argv = [sys.executable, "-c", run, argv_text, comm, str(port), "y" if ignore_term else ""]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        yield p
    finally:
        p.kill()
        p.wait()


def run_sh(script: str, home: Path) -> str:
    """A node's shell, here: sh (dash) reading the script on stdin, with the test's HOME."""
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        ["sh", "-s"], input=script, capture_output=True, text=True, env=env
    ).stdout


def gone(p: subprocess.Popen[str]) -> bool:
    return p.poll() is not None


def test_kill_is_clean_though_the_job_prints_a_foreign_listener(tmp_path: Path) -> None:
    """A forged `LISTEN <port> 1 ...` in a command line made kill report "not clean"."""
    port, tag = free_port(), f"hk{os.getpid()}/r1/n1"
    with child(f"x\nLISTEN {port} 1 root sshd\nLEFT 1\nSIGKILL 1", tag) as p:
        pattern = job_node_pattern(tag.split("/", maxsplit=1)[0], "n1")
        r = parse_kill("n1", run_sh(kill_script(pattern, "none", [port], 0.5), tmp_path))
        assert r.clean and r.port_holders == () and r.left == () and r.sigkilled == (), r
        assert [x.pid for x in r.found] == [p.pid] and r.malformed == 0
        assert "x LISTEN" in r.found[0].cmdline  # shown on one line, never read as a record
        wait_for(lambda: gone(p), 5, what="the job's process gone")


def test_kill_never_takes_a_process_name_for_its_state(tmp_path: Path) -> None:
    """comm "x) Z" made a live process that ignores SIGTERM look like a zombie: it was
    never sent SIGKILL and the kill said clean."""
    tag = f"hz{os.getpid()}/r1/n1"
    with child("", tag, comm="x) Z 1", ignore_term=True) as p:
        pattern = job_node_pattern(tag.split("/", maxsplit=1)[0], "n1")
        r = parse_kill("n1", run_sh(kill_script(pattern, "none", [], 0.3), tmp_path))
        assert r.sigkilled == (p.pid,) and r.clean, r
        wait_for(lambda: gone(p), 5, what="the process SIGKILLed")


def test_cleanup_cannot_be_steered_to_another_pid(tmp_path: Path) -> None:
    """A listener whose argv holds `\\nLISTEN <port> <victim> <user>` got the victim
    chosen for killing; the free script re-derives every PID from ss on the node."""
    port = free_port()
    with child("") as victim:
        forged = f"x\nLISTEN {port} {victim.pid} {os.environ.get('USER', 'root')} y"
        with child(forged, port=port) as holder:
            found = parse_listeners(node_lines(run_sh(holders_script([port]), tmp_path)))
            # Even a list that names the victim (as the old parser produced) kills only
            # what ss says holds the port.
            listed = (*found, PortHolder(port, victim.pid, "me", "forged"))
            out = run_sh(free_script(listed, 0.5), tmp_path)
            wait_for(lambda: gone(holder), 5, what="the holder gone")
            assert not gone(victim), "a PID that only a command line named was killed"
            assert [(h.port, h.pid) for h in found] == [(port, holder.pid)]
            assert parse_free(out) == ((holder.pid,), ())
