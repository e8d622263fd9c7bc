"""GPU parsing on recorded real nvidia-smi output, the poll script and its parser, state
derivation, and the judge the coordinator runs (node/rules/judging.py) on what a poll reads."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from snaps import judge_of, snap

from mntui.sessions.config import Action, WatchPolicy
from mntui.sessions.poll import NodeState, derive, may_still_run
from mntui.sessions.poll.gpu import parse_apps, parse_gpus, parse_reading
from mntui.sessions.poll.pollscript import poll_script
from mntui.sessions.poll.pollstate import PollState, parse_poll
from mntui.sessions.poll.snapshot import JobProc, NodeSnapshot
from mntui.sessions.runs import NodeRecord

SMI = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"


def test_h100x8_recording() -> None:
    gpus, errors = parse_gpus((SMI / "h100x8.gpu.csv").read_text())
    assert len(gpus) == 8 and errors == ()
    assert gpus[0].name == "NVIDIA H100 80GB HBM3" and gpus[0].mem_total == 81559
    assert [g.util for g in gpus] == [100, 98, 100, 100, 100, 98, 100, 99]
    assert gpus[4].mem_fraction == pytest.approx(21340 / 81559)
    assert gpus[0].power is None and gpus[0].temperature is None  # not queried: None, not 0


def test_na_and_not_supported_are_none() -> None:
    gpus, _ = parse_gpus((SMI / "na-fields.gpu.csv").read_text())
    assert gpus[0].power_limit == 350.0 and gpus[1].power_limit is None
    assert gpus[1].name == "NVIDIA RTX A2000 Laptop GPU"


def test_gpu_off_the_bus_is_an_error_not_a_crash() -> None:
    text = (SMI / "fell-off-bus.txt").read_text() + (SMI / "small6g.gpu.csv").read_text()
    gpus, errors = parse_gpus(text)
    assert errors == (
        "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error",
    )
    assert len(gpus) == 1 and gpus[0].index == 0 and gpus[0].util == 95 and gpus[0].name is None


def test_apps_own_and_foreign() -> None:
    r = parse_reading(
        (SMI / "rtx4090.gpu.csv").read_text(),
        (SMI / "small6g.apps.csv").read_text(),
        frozenset({1597}),
    )
    assert r.gpus[0].name == "NVIDIA GeForce RTX 4090" and r.gpus[0].util == 0
    assert [(a.pid, a.own, a.used_memory) for a in r.apps] == [
        (1580, False, 340),
        (1597, True, 394),
    ]
    assert [a.pid for a in r.foreign_apps] == [1580]
    assert parse_apps("pid, gpu_uuid, used_gpu_memory [MiB], process_name\n")[0] == ()


def proc(pid: int, ppid: int, state: str = "S") -> JobProc:
    return JobProc(pid, ppid, state, None, 1.0, "x")


HEALTHY = (proc(10, 1), proc(11, 10), proc(12, 11))


@pytest.mark.parametrize(
    "s, state",
    [
        (snap(reachable=False, error="timed out"), NodeState.UNREACHABLE),
        (snap(procs=HEALTHY), NodeState.RUNNING),
        (snap(procs=HEALTHY, log_size=0), NodeState.STARTING),
        (snap(procs=HEALTHY, output_age=301.0), NodeState.STALLED),
        (snap(procs=(proc(10, 1), proc(11, 10), proc(12, 11, "T"))), NodeState.FROZEN),
        (snap(procs=(proc(10, 1), proc(12, 1))), NodeState.ORPHANED),  # torchrun (11) died
        (snap(procs=(proc(12, 1),), pane_dead=True, exit_code=137), NodeState.ORPHANED),
        (snap(procs=(), exit_code=0, pane_dead=True), NodeState.FINISHED),
        (snap(procs=(), exit_code=1, pane_dead=True), NodeState.FAILED),
        (snap(procs=(), pane_dead=True), NodeState.FAILED),  # killed, no exit code
        (snap(procs=(), session=False, pane_dead=None, pane_pid=None), NodeState.NOT_RUNNING),
        (snap(procs=(proc(10, 1), proc(11, 10, "Z"))), NodeState.RUNNING),  # zombies do not count
    ],
)
def test_state_derivation(s: NodeSnapshot, state: NodeState) -> None:
    assert derive(s, stall_after=300).state is state


def test_judge_waits_for_frozen_after_and_unreachable_after() -> None:
    j = judge_of(WatchPolicy(frozen_after=3, unreachable_after=30))
    frozen = {"a": snap(procs=(proc(10, 1, "T"),)), "b": snap(node="b", procs=HEALTHY)}
    assert j.judge(frozen, 100.0)[1] == []
    assert j.judge(frozen, 102.9)[1] == []
    (t,) = j.judge(frozen, 103.0)[1]
    assert (t.node, t.state, t.action) == ("a", NodeState.FROZEN, Action.KILL_ALL.value)
    gone = {"a": snap(reachable=False, error="x"), "b": snap(node="b", procs=HEALTHY)}
    j = judge_of()
    assert j.judge(gone, 0.0)[1] == [] and j.judge(gone, 29.0)[1] == []
    assert j.judge(gone, 30.0)[1][0].state is NodeState.UNREACHABLE


def test_judge_failure_now_stall_notifies_once_and_finished_job_is_left_alone() -> None:
    j = judge_of()
    failed = {"a": snap(procs=(), exit_code=1, pane_dead=True), "b": snap(node="b", procs=HEALTHY)}
    assert [t.action for t in j.judge(failed, 0.0)[1]] == [Action.KILL_ALL.value]
    stalled = {"a": snap(procs=HEALTHY, output_age=400.0)}
    j = judge_of()
    assert [t.action for t in j.judge(stalled, 0.0)[1]] == [Action.NOTIFY.value]
    assert j.judge(stalled, 1.0)[1] == []
    # Every node is done and one failed: nothing left running to tear down.
    done = {
        "a": snap(procs=(), exit_code=1, pane_dead=True),
        "b": snap(node="b", procs=(), exit_code=0),
    }
    assert judge_of().judge(done, 0.0)[1] == []


def test_a_job_whose_nodes_do_not_answer_is_never_taken_for_ended() -> None:
    """Every node unreachable, or one unreachable beside one that ended without a clean
    exit: the job may still run there, so unreachable_after tears it down (it was dropped,
    no node being "active", and the judge then acted as if the job had ended). Beside
    a clean exit, the silence is the end of an allocation: no teardown, no restart."""
    assert may_still_run([NodeState.UNREACHABLE, NodeState.UNREACHABLE])
    assert may_still_run([NodeState.UNREACHABLE, NodeState.FAILED])
    assert not may_still_run([NodeState.UNREACHABLE, NodeState.FINISHED])
    assert not may_still_run([NodeState.FAILED, NodeState.NOT_RUNNING, NodeState.FINISHED])
    assert may_still_run([NodeState.FINISHED, NodeState.FROZEN])
    gone = snap(reachable=False, error="x")
    cut_off = {"a": gone, "b": snap(node="b", reachable=False)}
    beside_failed = {"a": gone, "b": snap(node="b", procs=(), exit_code=1, pane_dead=True)}
    beside_done = {"a": gone, "b": snap(node="b", procs=(), exit_code=0, pane_dead=True)}
    for snaps, at_once, later in (
        (cut_off, [], ["a", "b"]),
        (beside_failed, ["b"], ["a", "b"]),  # b's failure acts at once, a's silence after 30 s
        (beside_done, [], []),
    ):
        j = judge_of(WatchPolicy(unreachable_after=30))
        assert [t.node for t in j.judge(snaps, 0.0)[1]] == at_once
        triggers = j.judge(snaps, 30.0)[1]
        assert sorted(t.node for t in triggers) == later
        assert all(t.action == Action.KILL_ALL.value for t in triggers)


LAUNCH64 = base64.b64encode(b"bash\0./launch.sh\0").decode()  # as the node sends a command line


def test_parse_poll_sections_and_cpu() -> None:
    rec = NodeRecord("n", "h", 1, "j-n", "j/r/n", ".mntui/runs/j/r/n")
    st = PollState()
    stat = "S 1 10 10 0 -1 4194304 0 0 0 0 {u} 50 0 0 20 0 1 0 100 1000 2560 0"
    out = (
        "@NOW 1000.0\n@SYS 100 4096 8\n@UP 500.0\n@PANE 0 10 \n"
        f"@P 10 {stat.format(u=100)}\n@C 10 {LAUNCH64}\n"
        "@LOAD 0.50 0.40 0.30 1/100 99\n@MEM MemTotal: 2097152\n@MEM MemAvailable: 1048576\n"
        "@PORTS\n@L 29500 10\n"
        "@NOSMI\n@LOGSTAT 5 995\n@LOG aGVsbG8=\n@END\n"
    )
    s = parse_poll(rec, out, st, 0.01)
    assert s.procs[0].cmdline == "bash ./launch.sh" and s.procs[0].cpu_percent is None
    assert s.procs[0].rss_mib == 10.0 and s.ports == (29500,) and s.gpu is None
    assert s.load == (0.5, 0.4, 0.3) and s.mem_total_mib == 2048 and s.ncpu == 8
    assert s.new_output == b"hello" and s.output_age == pytest.approx(5, abs=0.5) and st.offset == 5
    assert s.node_time == 1000.0 and st.pane_pid == 10
    # Later polls: no node clock; CPU from uptime deltas, output age from size changes seen here.
    out2 = (
        out.replace("@NOW 1000.0\n@SYS 100 4096 8\n", "")
        .replace("@UP 500.0", "@UP 502.0")
        .replace(stat.format(u=100), stat.format(u=200))
        .replace("@LOGSTAT 5 995", "@LOGSTAT 9 999")
    )
    s2 = parse_poll(
        rec, out2.replace(f"@C 10 {LAUNCH64}\n", "").replace("@LOG aGVsbG8=\n", ""), st, 0.01
    )
    assert (
        s2.procs[0].cpu_percent == pytest.approx(50.0) and s2.procs[0].cmdline == "bash ./launch.sh"
    )
    assert s2.output_age is not None and s2.output_age < 0.5 and s2.ports == (29500,)


# -- node output is data ---------------------------------------------------------------


def test_malformed_poll_lines_are_counted_never_raised() -> None:
    """`@MEM x` / `@UP abc` raised ValueError, which turned the node "unreachable"."""
    rec = NodeRecord("n", "h", 1, "j-n", "j/r/n", ".mntui/runs/j/r/n")
    bad = [
        "@MEM x",
        "@UP abc",
        "@SYS a b c",
        "@MEM MemTotal: 1e9",
        "@P 12 T 1 0",  # too short for a stat line
        "@P 13 S " + " ".join(["1"] * 21) + " x",
        "@PANE 0 12 3 4",
        "@EXIT 1.5",
        "@C 14 not*base64",
        "@L 29500 10",  # a listener outside the port scan
        "@LOG !!!!",
        "@LOAD 1 2 3",
        "@UP ١٢٣.٠",  # digits, but not ASCII ones: float() would take them
        "@NOW " + "9" * 5000 + ".0",
        "STAT 1",
    ]
    out = "@UP 5.0\n" + "\n".join(bad) + "\n@PANE 0 10 \n@END\n"
    s = parse_poll(rec, out, PollState(), 0.01)
    assert s.reachable and s.malformed == len(bad)
    assert s.procs == () and s.mem_total_mib is None and s.exit_code is None
    assert s.pane_pid == 10 and s.node_time is None and s.new_output == b""


def test_records_end_at_newline_only() -> None:
    """str.splitlines also splits at \\x1c, \\x85, \\u2028...: a command line holding one
    could start a record of its own. A node's shell ends records with \\n alone."""
    rec = NodeRecord("n", "h", 1, "j-n", "j/r/n", ".mntui/runs/j/r/n")
    out = "@UP 5.0\n@PANE 0 10 \x1c@EXIT 1\u2028@P 999 T " + " ".join(["1"] * 21) + "\n@END\n"
    s = parse_poll(rec, out, PollState(), 0.01)
    assert s.exit_code is None and s.procs == () and s.malformed == 1


def test_poll_reads_lying_processes_as_data(tmp_path: Path) -> None:
    """The real poll script, run here by sh, on a tagged process whose command line holds
    a whole stopped process (`@P 999999 T ...`) and whose name holds `) T`: the old
    poll saw a frozen job and the judge killed it."""
    tag = f"hp{os.getpid()}/r1/n1"
    forged = f"x\n@P 999999 T {' '.join(['1'] * 21)}\n@EXIT 1\n@PANE 1 1 1\n@END"
    code = "import sys, time; open('/proc/self/comm', 'w').write('x) T 1 1 1 1 1'); "
    code += "print('ready', flush=True); time.sleep(60)"
    p = subprocess.Popen(
        [sys.executable, "-c", code, forged],
        env={**os.environ, "MNTUI_RUN": tag},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        rec = NodeRecord("n1", "h", 0, "none", tag, "run")
        script = poll_script(rec, 0, frozenset(), True, gpus=False, pane_pid=p.pid)
        env = {**os.environ, "HOME": str(tmp_path)}
        out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, env=env)
        s = parse_poll(rec, out.stdout, PollState(), 0.01, gpus=False)
        judge = judge_of(WatchPolicy(frozen_after=1))
        assert judge.judge({"n1": s}, 0.0)[1] == [] and judge.judge({"n1": s}, 60.0)[1] == []
        assert [(x.pid, x.state, x.ppid) for x in s.procs] == [(p.pid, "S", os.getpid())]
        assert derive(s, stall_after=300).state is NodeState.STARTING and s.exit_code is None
        assert "x @P 999999 T" in s.procs[0].cmdline and s.malformed == 0  # one line, data
    finally:
        p.kill()
        p.wait()


def test_a_late_viewer_reads_exactly_the_last_bytes_before_the_size(tmp_path: Path) -> None:
    """`status` and the app start near the end of each log: the first poll carries the
    last `keep` bytes (STEP on a one-shot status), and the next one follows from the size."""
    from mntui.sessions.poll.pollscript import parse_answer, poll_script
    from mntui.sessions.runs import NodeRecord

    run = tmp_path / "run"
    run.mkdir()
    data = bytes(range(256)) * 40 + b"step 7\npartial"
    (run / "output.log").write_bytes(data)
    rec = NodeRecord("n1", "h", 0, "none", "tag/none", "run")
    env = {**os.environ, "HOME": str(tmp_path)}
    for keep, want in ((100, data[-100:]), (0, b""), (10**6, data)):
        script = poll_script(rec, 0, frozenset(), True, gpus=False, ports=False, keep=keep)
        assert subprocess.run(["dash", "-n"], input=script, text=True).returncode == 0
        check = subprocess.run(
            [str(Path(sys.executable).parent / "shellcheck"), "-s", "sh", "-"],
            input=script,
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stdout
        out = subprocess.run(["dash", "-s"], input=script, capture_output=True, text=True, env=env)
        a = parse_answer(out.stdout)
        assert a.log_size == len(data) and a.log == want[-65536:] and a.malformed == 0


def test_the_poll_tree_descends_into_children(tmp_path: Path) -> None:
    """/proc/PID/task/TID/children ends without a newline: `read` sees EOF on it, and
    the old walk in lib.sh (`read ... && ...`) therefore never descended."""
    from mntui.sessions.poll.pollscript import TREE

    parent = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"])
    try:
        kids: list[str] = []
        for _ in range(100):
            kids = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            if len(kids) == 2:
                break
            threading.Event().wait(0.02)
        out = subprocess.run(
            ["dash", "-c", f"{TREE}\nmntui_poll_tree {parent.pid} 999999999"],
            capture_output=True,
            text=True,
        )
        assert sorted(out.stdout.split()) == sorted([str(parent.pid), *kids]), out
    finally:
        for kid in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split():
            os.kill(int(kid), 9)
        parent.kill()
        parent.wait()
