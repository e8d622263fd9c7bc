"""Parsers of our own marked output, and the shell helpers they read, run for real."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
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
    kill_spec,
    parse_free,
    parse_kill,
)
from mntui.sessions.launch.sentinelship import bundle
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


def result(**changes: object) -> str:
    """A node kill's result line (node/proc/killer.py's `kill` verb), with `changes`."""
    d: dict[str, object] = {
        "found": [[10, "S", "bash ./launch.sh"], [11, "T", "python3 -m torch.distributed.run x"]],
        "sigkilled": [11, 11],
        "left": [],
        "session_killed": True,
        "port_holders": [29500],
        "holders": [[29500, 99, 1000, "bob", "python3 other.py"]],
        "seconds": 1.234,
        "phases": {"scan": 0.01},
    }
    return f"KILL_RESULT {json.dumps({**d, **changes})}\n"


def test_parse_kill_report() -> None:
    r = parse_kill("g1", result())
    assert [p.pid for p in r.found] == [10, 11] and r.sigkilled == (11,) and r.left == ()
    assert r.session_killed and r.seconds == 1.234 and r.malformed == 0
    assert (
        not r.clean
        and r.port_holders[0].describe() == "port 29500 held by pid 99 (bob): python3 other.py"
    )
    assert "1 needed SIGKILL" in r.summary()
    hidden = parse_kill("g1", result(holders=[[29500, None, 7, "", ""]]))
    assert (
        hidden.port_holders[0].describe() == "port 29500 held by uid 7, a process hidden from you"
    )
    older = parse_kill("g1", result(holders=None).replace(', "holders": null', ""))
    assert [h.port for h in older.port_holders] == [29500] and not older.clean  # a port alone


def test_a_kill_result_of_another_shape_is_never_taken_for_clean() -> None:
    """Node output is data: a result that does not read is the node's failure, said, never
    a clean kill; a line that is no record is counted."""
    for bad in (
        result(left=["1"]),
        result(found=[[10, "S"]]),
        result(session_killed="yes"),
        result(seconds=None),
        "KILL_RESULT {not json\n",
        result() + result(),
        "",
    ):
        with pytest.raises(NodeError, match="g1: the kill"):
            parse_kill("g1", bad)
    r = parse_kill("g1", f"LISTEN 29500 1 root x\nLEFT 1\n{result(port_holders=[], holders=[])}")
    assert r.clean and r.malformed == 2 and "2 unreadable line(s)" in r.summary()
    cmd = "x\x1b[2J\nKILL_RESULT {}\u202e"
    r = parse_kill("g1", result(found=[[5, "Sx", cmd]], port_holders=[], holders=[]))
    assert [(p.pid, p.state) for p in r.found] == [(5, "S")] and "\x1b" not in r.found[0].cmdline
    assert "\n" not in r.found[0].cmdline


def test_a_node_without_a_python_for_the_kill_says_so() -> None:
    tried, said = b64(" python3 python3.9"), b64("NODE_PYTHON 3.6: 3.9 or later needed")
    with pytest.raises(NodeError, match=r"python3 3\.9 or later .* none runs there") as e:
        parse_kill("g1", f"KILL_NO_PYTHON {tried} {said}\n")
    assert "python3 python3.9" in str(e.value) and "NODE_PYTHON 3.6" in str(e.value)


def test_a_kill_by_tag_takes_every_watcher_of_the_job_on_the_node_and_nothing_else() -> None:
    """The ranks, the sentinel, the coordinator and a worker's guard (node/sentinel/guard.py):
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


def test_log_answers_count_what_is_no_record() -> None:
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


def node_kill(job: str, ports: list[int], grace: float, home: Path) -> str:
    """The manager's kill of `job` on node n1 as a node runs it (the bundle shipped to
    `home`, its `kill` verb on this machine's python3)."""
    spec = kill_spec(job, "n1", ports, grace)
    spec["session"] = None
    return run_sh(kill_script(spec, bundle(), ship=True), home)


def run_sh(script: str, home: Path) -> str:
    """A node's shell, here: sh (dash) reading the script on stdin, with the test's HOME."""
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        ["sh", "-s"], input=script, capture_output=True, text=True, env=env
    ).stdout


def gone(p: subprocess.Popen[str]) -> bool:
    return p.poll() is not None


def test_kill_is_clean_though_the_job_prints_a_foreign_listener(tmp_path: Path) -> None:
    """A forged `LISTEN <port> 1 ...` in a command line made the shell kill report "not
    clean"; the node kill's JSON carries a command line as a string, whatever it holds."""
    port, tag = free_port(), f"hk{os.getpid()}/r1/n1"
    with child(f"x\nLISTEN {port} 1 root sshd\nLEFT 1\nSIGKILL 1", tag) as p:
        r = parse_kill("n1", node_kill(tag.split("/", maxsplit=1)[0], [port], 0.5, tmp_path))
        assert r.clean and r.port_holders == () and r.left == () and r.sigkilled == (), r
        assert [x.pid for x in r.found] == [p.pid] and r.malformed == 0
        assert "x LISTEN" in r.found[0].cmdline  # shown on one line, never read as a record
        wait_for(lambda: gone(p), 5, what="the job's process gone")


def test_kill_never_takes_a_process_name_for_its_state(tmp_path: Path) -> None:
    """comm "x) Z" made a live process that ignores SIGTERM look like a zombie: it was
    never sent SIGKILL and the kill said clean."""
    tag = f"hz{os.getpid()}/r1/n1"
    with child("", tag, comm="x) Z 1", ignore_term=True) as p:
        r = parse_kill("n1", node_kill(tag.split("/", maxsplit=1)[0], [], 0.3, tmp_path))
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


def test_a_node_whose_python3_is_too_old_kills_with_a_python_the_job_runs(tmp_path: Path) -> None:
    """Bare python3 3.6 (the bundle refuses it: exit 3) and no python3.N on the PATH, as on
    a node whose jobs run in a conda env their `setup` activates: the kill runs on the
    interpreter a process of this user runs already (the job's own), and kills the job."""
    tag = f"hp{os.getpid()}/r1/n1"
    job = tag.split("/", maxsplit=1)[0]
    assert parse_kill("n1", node_kill(job, [], 0.3, tmp_path)).found == ()  # ships the bundle
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("grep", "base64", "readlink", "tail"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    old = bin_dir / "python3"
    old.write_text("#!/bin/sh\necho 'NODE_PYTHON 3.6: 3.9 or later needed'\nexit 3\n")
    old.chmod(0o755)
    spec = kill_spec(job, "n1", [], 0.3)
    spec["session"] = None
    env = {**os.environ, "HOME": str(tmp_path), "PATH": str(bin_dir)}
    with child("", tag) as p:
        script = kill_script(spec, bundle())
        out = subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, text=True,
                             env=env).stdout  # fmt: skip
        r = parse_kill("n1", out)
        assert [x.pid for x in r.found] == [p.pid] and r.clean, out
        wait_for(lambda: gone(p), 5, what="the job's process gone")


def test_a_sweep_names_what_a_clean_report_left_and_never_a_leaving_watcher() -> None:
    """The final sweep after a sentinel's clean report (launch/userkill.py): the job's
    processes it finds are what the report missed; a watcher it finds (a sentinel still
    leaving after the coordinator's stop) is not."""
    clean = {"port_holders": [], "holders": []}
    said = parse_kill("g1", result(found=[], sigkilled=[], **clean))
    leaving = parse_kill("g1", result(found=[[7, "S", "python3 x.pyz run"]], watchers=[7], **clean))
    assert leaving.jobs == () and leaving.watchers == (7,)
    left = parse_kill("g1", result(found=[[7, "S", "w"], [9, "S", "train"]], watchers=[7], **clean))
    merged = said.swept(left)
    assert [p.pid for p in merged.missed] == [9] and merged.clean
    assert "its sentinel reported it clean, yet 1 process(es) of the job were left (9)" in (
        merged.summary()
    )
