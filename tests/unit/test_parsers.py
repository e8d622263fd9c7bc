"""Parsers of our own marked output, and the shell helpers they read, run for real."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mntui.sessions.kill import parse_kill
from mntui.sessions.logs import LineSplitter, parse_read
from mntui.sessions.procs import SHELL_LIB, job_node_pattern, parse_listeners, parse_procs
from mntui.sessions.remote import BEGIN, END, NodeError, find_end, frame, unwrap


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
    out = (
        "PROC 10 S bash ./launch.sh \nPROC 11 T python3 -m torch.distributed.run x\n"
        "SIGKILL 11\nPROC 11 T python3 -m torch.distributed.run x\nSESSION_KILLED\nLEFT \n"
        "LISTEN 29500 99 bob python3 other.py\nELAPSED_MS 1234\n"
    )
    r = parse_kill("g1", out)
    assert [p.pid for p in r.found] == [10, 11] and r.sigkilled == (11,) and r.left == ()
    assert r.session_killed and r.seconds == 1.234
    assert (
        not r.clean
        and r.port_holders[0].describe() == "port 29500 held by pid 99 (bob): python3 other.py"
    )
    assert "1 needed SIGKILL" in r.summary()


def test_parse_listeners_dedupes_v4_v6_and_foreign() -> None:
    hs = parse_listeners(
        ["LISTEN 1 5 me a", "LISTEN 1 5 me a", "LISTEN 2 - ? (owned by another user)", "junk"]
    )
    assert [(h.port, h.pid, h.user) for h in hs] == [(1, 5, "me"), (2, None, None)]
    assert "another user" in hs[1].describe()


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
