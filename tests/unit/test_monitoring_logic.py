"""GPU parsing on recorded real nvidia-smi output, state derivation, the watchdog's judge."""

from __future__ import annotations

from pathlib import Path

import pytest

from mntui.sessions.config import Action, WatchPolicy
from mntui.sessions.gpu import parse_apps, parse_gpus, parse_reading
from mntui.sessions.poll import JobProc, NodeSnapshot, _NodeState, parse_poll
from mntui.sessions.runs import NodeRecord
from mntui.sessions.states import NodeState, derive
from mntui.sessions.watch import Judge

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


def snap(**kw: object) -> NodeSnapshot:
    base: dict[str, object] = {
        "node": "n",
        "rank": 0,
        "at": 0.0,
        "reachable": True,
        "session": True,
        "pane_dead": False,
        "pane_pid": 10,
        "log_size": 100,
        "output_age": 1.0,
    }
    base.update(kw)
    return NodeSnapshot(**base)  # type: ignore[arg-type]


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
    j = Judge(WatchPolicy(frozen_after=3, unreachable_after=30))
    frozen = {"a": snap(procs=(proc(10, 1, "T"),)), "b": snap(node="b", procs=HEALTHY)}
    assert j.judge(frozen, 100.0)[1] == []
    assert j.judge(frozen, 102.9)[1] == []
    (t,) = j.judge(frozen, 103.0)[1]
    assert (t.node, t.state, t.action) == ("a", NodeState.FROZEN, Action.KILL_ALL)
    gone = {"a": snap(reachable=False, error="x"), "b": snap(node="b", procs=HEALTHY)}
    j = Judge(WatchPolicy())
    assert j.judge(gone, 0.0)[1] == [] and j.judge(gone, 29.0)[1] == []
    assert j.judge(gone, 30.0)[1][0].state is NodeState.UNREACHABLE


def test_judge_failure_now_stall_notifies_once_and_finished_job_is_left_alone() -> None:
    j = Judge(WatchPolicy())
    failed = {"a": snap(procs=(), exit_code=1, pane_dead=True), "b": snap(node="b", procs=HEALTHY)}
    assert [t.action for t in j.judge(failed, 0.0)[1]] == [Action.KILL_ALL]
    stalled = {"a": snap(procs=HEALTHY, output_age=400.0)}
    j = Judge(WatchPolicy())
    assert [t.action for t in j.judge(stalled, 0.0)[1]] == [Action.NOTIFY]
    assert j.judge(stalled, 1.0)[1] == []
    # Every node is done and one failed: nothing left running to tear down.
    done = {
        "a": snap(procs=(), exit_code=1, pane_dead=True),
        "b": snap(node="b", procs=(), exit_code=0),
    }
    assert Judge(WatchPolicy()).judge(done, 0.0)[1] == []


def test_parse_poll_sections_and_cpu() -> None:
    rec = NodeRecord("n", "h", 1, "j-n", "j/r/n", ".mntui/runs/j/r/n")
    st = _NodeState()
    stat = "S 1 10 10 0 -1 4194304 0 0 0 0 {u} 50 0 0 20 0 1 0 100 1000 2560 0"
    out = (
        "@NOW 1000.0\n@SYS 100 4096 8\n@UP 500.0\n@PANE 0 10 \n"
        f"@P 10 {stat.format(u=100)}\n@C 10 bash ./launch.sh\n"
        "@LOAD 0.50 0.40 0.30 1/100 99\n@MEM MemTotal: 2097152\n@MEM MemAvailable: 1048576\n"
        '@LISTEN\nLISTEN 0 128 0.0.0.0:29500 0.0.0.0:* users:(("python",pid=10,fd=3))\n'
        "@NOSMI\n@LOGSTAT 5 995\n@LOG\naGVsbG8=\n@END\n"
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
        rec, out2.replace("@C 10 bash ./launch.sh\n", "").replace("@LOG\naGVsbG8=\n", ""), st, 0.01
    )
    assert (
        s2.procs[0].cpu_percent == pytest.approx(50.0) and s2.procs[0].cmdline == "bash ./launch.sh"
    )
    assert s2.output_age is not None and s2.output_age < 0.5 and s2.ports == (29500,)


def test_two_watchdogs_never_both_hold_a_run(tmp_path: Path) -> None:
    """The lock is per run and dies with its holder; a second taker is told who holds it."""
    import subprocess
    import sys

    from mntui.sessions.runs import RunRecord
    from mntui.sessions.watch import LockHeld, acquire_lock

    rec = RunRecord("j", "r1", "cfg.yaml", "m", 1, [NodeRecord("n", "h", 0, "j-n", "j/r1/n", "d")])
    lock = acquire_lock(rec)
    code = (
        "import sys; from mntui.sessions.runs import RunRecord, NodeRecord\n"
        "from mntui.sessions.watch import acquire_lock, LockHeld\n"
        "rec = RunRecord('j', 'r1', 'cfg.yaml', 'm', 1, [])\n"
        "try:\n    acquire_lock(rec)\nexcept LockHeld as e:\n    print('HELD', e.holder); sys.exit(3)\n"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert other.returncode == 3 and other.stdout.split() == [
        "HELD",
        str(__import__("os").getpid()),
    ]
    lock.close()
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    with pytest.raises(LockHeld):
        held = acquire_lock(rec)
        try:
            acquire_lock(rec)
        finally:
            held.close()
